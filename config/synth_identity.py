# Synthetic-screen arm: Q = X (no query projection; the paper's 1/(2 sqrt(d_h)) scale).
from config.synth_baseline import *  # noqa: F401,F403

out_dir = "out-synth-identity"
wandb_run_name = "identity"
query_mode = "identity"
