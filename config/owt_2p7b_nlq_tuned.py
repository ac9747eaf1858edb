# GPT-3 2.7B, residual-GELU queries with the paper's tuned schedule carried over as ratios to the baseline at
# GPT-2 small: lr x 5 (3e-3 / 6e-4), min lr 1 % of it (3e-5 / 3e-3), weight decay 2^-5; untested at this size.
from config.gpt3_2p7b import *  # noqa: F401,F403

out_dir = "out-owt-2p7b-nlq-tuned"
wandb_run_name = "residual_gelu_tuned"
query_mode = "residual_gelu"
learning_rate = learning_rate * 5  # noqa: F405
min_lr = learning_rate / 100
weight_decay = 2**-5
