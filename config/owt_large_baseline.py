# GPT-3 Large (760M), the baseline: linear W_Q at GPT-3's learning rate for this size.
from config.gpt3_large import *  # noqa: F401,F403

out_dir = "out-owt-large-baseline"
wandb_run_name = "baseline"
