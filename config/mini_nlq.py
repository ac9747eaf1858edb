# Miniature arm: the residual-GELU query at 4/3 of the baseline's learning rate (the paper: 8e-4 vs 6e-4).
from config.mini_baseline import *  # noqa: F401,F403

out_dir = "out-mini-nlq"
wandb_run_name = "nlq"
query_mode = "residual_gelu"
learning_rate = 1e-3 * 8 / 6
min_lr = learning_rate / 10
