# arXiv 2603.13381, identity queries: Q = X (no W_Q), softmax scale 1/(2 sqrt(head_dim)), weight decay
# 2^-5. The paper reports it matching the baseline with 7.1M fewer parameters.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-identity"
wandb_run_name = "identity"
query_mode = "identity"
weight_decay = 2**-5
