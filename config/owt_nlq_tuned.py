# arXiv 2603.13381, residual-GELU queries with the tuned schedule: lr 3e-3, min lr 3e-5, weight decay
# 2^-5: val loss 2.915, the paper's best row.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-nlq-tuned"
wandb_run_name = "residual_gelu_tuned"
query_mode = "residual_gelu"
learning_rate = 3e-3
min_lr = 3e-5
weight_decay = 2**-5
