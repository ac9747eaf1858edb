# Miniature arm: linear W_Q with the tuned arm's optimizer settings (5x the learning rate, min_lr 5e-5,
# weight decay 2^-5): nlq_tuned's control, so that what nlq_tuned gains can be told apart from its settings.
from config.mini_baseline import *  # noqa: F401,F403

out_dir = "out-mini-linear-tuned"
wandb_run_name = "linear_tuned"
learning_rate = 5e-3
min_lr = 5e-5
weight_decay = 2**-5
