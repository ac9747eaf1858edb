# arXiv 2604.10791's LoRA baseline for the Pythia-160M probe: rank 480, alpha 2r, on the attention's input
# (query_key_value) and output (dense) projections, same data and schedule. Reported: LAMBADA 0.126 /
# HellaSwag 0.326 / ARC-E 0.346 / PPL 63.8.
from config.probe_pythia160m import *  # noqa: F401,F403

out_dir = "out-probe-pythia160m-lora"
preproj = False
content_skip = False
lora_rank = 480
wandb_run_name = "lora_r480"
