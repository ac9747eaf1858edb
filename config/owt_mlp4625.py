# arXiv 2603.13381's MLP-width ablation: MLP 4.625x = 3552 hidden.
# Linear queries: the 4.33x arm's parameter count (89,672,448) is the linear model's; that the other widths
# also ablate the linear baseline is this project's reading, not checked against the official configs.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-mlp4625"
wandb_run_name = "mlp4625"
mlp_ratio = 4.625
