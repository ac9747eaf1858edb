# Synthetic-screen arm: Q = X + X W_Q (the residual linear query).
from config.synth_baseline import *  # noqa: F401,F403

out_dir = "out-synth-residual"
wandb_run_name = "residual"
query_mode = "residual"
