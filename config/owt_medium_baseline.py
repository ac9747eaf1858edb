# GPT-3 Medium (350M), the baseline: linear W_Q at GPT-3's learning rate for this size.
from config.gpt3_medium import *  # noqa: F401,F403

out_dir = "out-owt-medium-baseline"
wandb_run_name = "baseline"
