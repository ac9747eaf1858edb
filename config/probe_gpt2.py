# The frozen probe of arXiv 2604.10791 on GPT-2 small (124M), the GPT-2 counterpart of Pythia-160M:
# same recipe, data tokenized with GPT-2 BPE.
#   python data/wikitext/prepare.py && python train.py config/probe_gpt2.py
from config.probe_pythia160m import *  # noqa: F401,F403

init_from = "gpt2"
out_dir = "out-probe-gpt2"
dataset = "wikitext"
wandb_group = "probe-gpt2"
