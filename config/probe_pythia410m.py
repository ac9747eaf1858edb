# The frozen probe of arXiv 2604.10791 on Pythia-410M (same data and schedule as config/probe_pythia160m.py).
from config.probe_pythia160m import *  # noqa: F401,F403

init_from = "EleutherAI/pythia-410m"
out_dir = "out-probe-pythia410m"
dataset = "wikitext_pythia"  # Pythia-160M and -410M share a tokenizer
wandb_group = "probe-pythia410m"
