# Frozen probe of arXiv 2604.10791 on Pythia-160M: pre-projection + content skip trained on WikiText-103,
# every pretrained weight frozen. The paper's setting: lr 1e-5, 500 steps, batch 16 x 512 tokens, warmup
# 50, cosine, weight decay 0, the first 2000 train lines longer than 50 characters. It reports LAMBADA
# 0.180 / HellaSwag 0.338 / ARC-E 0.348 / PPL 47.9 (frozen baseline 0.128 / 0.326 / 0.358 / 78.4).
#   python data/wikitext/prepare.py --tokenizer EleutherAI/pythia-160m --out_dir data/wikitext_pythia
#   python train.py config/probe_pythia160m.py && python zeroshot.py --out_dir=out-probe-pythia160m
init_from = "EleutherAI/pythia-160m"
out_dir = "out-probe-pythia160m"
dataset = "wikitext_pythia"
freeze_pretrained = True
preproj = True
content_skip = True
query_mode = "linear"
block_size = 512
batch_size = 16
gradient_accumulation_steps = 1
max_iters = 500
warmup_iters = 50
learning_rate = 1e-5
min_lr = 0.0
weight_decay = 0.0
grad_clip = 1.0
beta2 = 0.999  # the official code's AdamW betas (0.9, 0.999)
sampling = "lines"  # one WikiText line per row, padded to block_size, padding ignored in the loss (official)
# The official code holds the model and Adam state in bf16: --param_dtype=bfloat16. Kept fp32 here on purpose:
# in bf16 most of the 1e-5 updates to the pre-projection round away (README, "Where the probe differs").
param_dtype = "float32"
eval_interval = 100
eval_iters = 10
log_interval = 10
compile = False
wandb_project = "nonlinear-queries"
wandb_group = "probe-pythia160m"
wandb_run_name = "preproj_skip"
