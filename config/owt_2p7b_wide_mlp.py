# GPT-3 2.7B, linear W_Q with MLP hidden 4.75 d: the parameter-matched control (+12.5 % non-embedding
# parameters at every size, as at GPT-2 small).
from config.gpt3_2p7b import *  # noqa: F401,F403

out_dir = "out-owt-2p7b-wide-mlp"
wandb_run_name = "wide_mlp"
mlp_ratio = 4.75
