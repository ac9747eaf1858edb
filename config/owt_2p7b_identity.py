# GPT-3 2.7B, identity queries, Q = X (no W_Q), weight decay 2^-5 as arXiv 2603.13381's identity arm.
from config.gpt3_2p7b import *  # noqa: F401,F403

out_dir = "out-owt-2p7b-identity"
wandb_run_name = "identity"
query_mode = "identity"
weight_decay = 2**-5
