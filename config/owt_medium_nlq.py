# GPT-3 Medium (350M), residual-GELU nonlinear queries at GPT-3's learning rate x 4/3, the ratio of arXiv 2603.13381's
# nlq arm to its baseline at GPT-2 small (8e-4 / 6e-4); that it transfers to this size is untested.
from config.gpt3_medium import *  # noqa: F401,F403

out_dir = "out-owt-medium-nlq"
wandb_run_name = "residual_gelu"
query_mode = "residual_gelu"
learning_rate = learning_rate * 4 / 3  # noqa: F405
min_lr = learning_rate / 10
