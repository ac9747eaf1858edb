# GPT-3 XL (1.3B), the baseline: linear W_Q at GPT-3's learning rate for this size.
from config.gpt3_xl import *  # noqa: F401,F403

out_dir = "out-owt-xl-baseline"
wandb_run_name = "baseline"
