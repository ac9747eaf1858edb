# Synthetic-screen arm: the residual-GELU nonlinear query of arXiv 2603.13381, X + LayerNorm(W2 GELU(W1 RMSNorm(X))).
from config.synth_baseline import *  # noqa: F401,F403

out_dir = "out-synth-nlq"
wandb_run_name = "nlq"
query_mode = "residual_gelu"
