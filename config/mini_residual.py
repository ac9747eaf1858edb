# Miniature arm: Q = X + X W_Q, the linear ablation of the nonlinear query.
from config.mini_baseline import *  # noqa: F401,F403

out_dir = "out-mini-residual"
wandb_run_name = "residual"
query_mode = "residual"
