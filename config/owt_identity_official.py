# arXiv 2603.13381's identity arm as its official repository configures it (its only identity setting):
# untied embeddings and a cosine planned over 600,000 steps, of which the 60k trained here see lr fall from
# 6e-4 to about 5.9e-4. config/owt_identity.py runs this project's setting instead (tied, 60k cosine).
from config.owt_identity import *  # noqa: F401,F403

out_dir = "out-owt-identity-official"
wandb_run_name = "identity_official"
tie_embeddings = False
lr_decay_iters = 600_000
