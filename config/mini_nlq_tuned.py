# Miniature arm: the paper's tuned residual-GELU ratios: 5x the baseline's learning rate (3e-3 vs 6e-4),
# min_lr 1/20 of the baseline's peak (3e-5), weight decay 2^-5.
from config.mini_baseline import *  # noqa: F401,F403

out_dir = "out-mini-nlq-tuned"
wandb_run_name = "nlq_tuned"
query_mode = "residual_gelu"
learning_rate = 5e-3
min_lr = 5e-5
weight_decay = 2**-5
