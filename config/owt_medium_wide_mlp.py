# GPT-3 Medium (350M), linear W_Q with MLP hidden 4.75 d: the parameter-matched control (+12.5 % non-embedding
# parameters at every size, as at GPT-2 small).
from config.gpt3_medium import *  # noqa: F401,F403

out_dir = "out-owt-medium-wide-mlp"
wandb_run_name = "wide_mlp"
mlp_ratio = 4.75
