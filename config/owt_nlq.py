# The headline arm of arXiv 2603.13381: residual-GELU nonlinear queries,
# Q = (X + LayerNorm(W2 GELU(W1 RMSNorm(X)))) / 2, at lr 8e-4: val loss 2.919 (baseline 2.956).
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-nlq"
wandb_run_name = "residual_gelu"
query_mode = "residual_gelu"
learning_rate = 8e-4
min_lr = 8e-5
