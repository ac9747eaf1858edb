# arXiv 2603.13381, the parameter-matched control: linear queries with MLP hidden 4.75 d = 3648
# (+12.5 % non-embedding parameters): val loss 2.927.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-wide-mlp"
wandb_run_name = "wide_mlp"
query_mode = "linear"
mlp_ratio = 4.75
