# arXiv 2603.13381's linear ablation (from its official code): Q = X + X W_Q, softmax scale
# 1/(2 sqrt(head_dim)): the residual without the nonlinearity.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-residual"
wandb_run_name = "residual"
query_mode = "residual"
