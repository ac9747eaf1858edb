# arXiv 2604.10791's LoRA baseline for the Pythia-410M probe: rank 640 (its README's table; the rank its
# 07_benchmarks.py derives from the pre-projection's 62.9M parameters), alpha 2r, on the attention's input
# (query_key_value) and output (dense) projections, 94.4M trainable parameters (24 x 640 x 6 x 1024); same
# data and schedule as config/probe_pythia410m.py. Reported: LAMBADA 0.488 / HellaSwag 0.400
# / ARC-E 0.446 / PPL 17.7.
from config.probe_pythia410m import *  # noqa: F401,F403

out_dir = "out-probe-pythia410m-lora"
preproj = False
content_skip = False
lora_rank = 640
wandb_run_name = "lora_r640"
