# arXiv 2603.13381, identity queries: Q = X (no W_Q), softmax scale 1/(2 sqrt(head_dim)), weight decay
# 2^-5. The paper reports it matching the baseline with 7.1M fewer parameters.
# This project's setting: tied embeddings and the 60k cosine of every arm here. The official repository's
# only identity configuration is untied with a 600k-step cosine: config/owt_identity_official.py.
from config.owt_baseline import *  # noqa: F401,F403

out_dir = "out-owt-identity"
wandb_run_name = "identity"
query_mode = "identity"
weight_decay = 2**-5
