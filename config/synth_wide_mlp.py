# Synthetic-screen arm: linear queries with the MLP 4.75 d wide (the paper's parameter-matched control).
from config.synth_baseline import *  # noqa: F401,F403

out_dir = "out-synth-wide-mlp"
wandb_run_name = "wide_mlp"
mlp_ratio = 4.75
