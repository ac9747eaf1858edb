# The frozen probe of arXiv 2604.10791 on GPT-2 medium (355M), the GPT-2 counterpart of Pythia-410M.
from config.probe_gpt2 import *  # noqa: F401,F403

init_from = "gpt2-medium"
out_dir = "out-probe-gpt2-medium"
wandb_group = "probe-gpt2-medium"
