# GPT-3 2.7B, the baseline: linear W_Q at GPT-3's learning rate for this size.
from config.gpt3_2p7b import *  # noqa: F401,F403

out_dir = "out-owt-2p7b-baseline"
wandb_run_name = "baseline"
