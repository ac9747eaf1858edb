# Miniature arm: Q = X (no W_Q), weight decay 2^-5 as the paper's identity arm.
from config.mini_baseline import *  # noqa: F401,F403

out_dir = "out-mini-identity"
wandb_run_name = "identity"
query_mode = "identity"
weight_decay = 2**-5
