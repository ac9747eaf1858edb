# GPT-2 small on OpenWebText with the standard linear W_Q: the baseline arm of arXiv 2603.13381
# (Karbevski, "Beyond Linearity in Attention Projections"), Table 1: val loss 2.956 at 60k steps.
# 12 x 12 x 768, block 1024, vocab 50304, no biases, tied embeddings; 12 x 40 x 1024 = 491,520 tokens per
# step; AdamW (0.9, 0.95), clip 1.0, cosine schedule with 2000 warmup steps. Every arm imports this
# file and changes only what its row of the table changes, so all arms share the batches.
#   torchrun --standalone --nproc_per_node=8 train.py config/owt_baseline.py
out_dir = "out-owt-baseline"
dataset = "openwebtext"
data_seed = 1337
seed = 1337
wandb_log = True
wandb_project = "nonlinear-queries"
wandb_group = "owt-gpt2-small"
wandb_run_name = "baseline"

n_layer = 12
n_head = 12
n_embd = 768
block_size = 1024
vocab_size = 50304
bias = False
dropout = 0.0
query_mode = "linear"

batch_size = 12
gradient_accumulation_steps = 40  # total over all processes: 5 per GPU on 8 GPUs
max_iters = 60000
lr_decay_iters = 60002  # the official configs' cosine end (it trains steps 0..60002 and evaluates last at 60000)
warmup_iters = 2000
learning_rate = 6e-4
min_lr = 6e-5
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0

eval_interval = 1000
eval_iters = 200  # 200 x 12 = 2400 validation windows of 1024 tokens, the same for every arm
# The paper's own run, replayed (docs/check-against-the-paper.md): its initialisation at seed 1337, its batch of
# every step and its evaluation windows (its rows k at the k-th evaluation), from the same OpenWebText bins.
init_order = "official"
sampling = "official"
eval_order = "official"
log_interval = 10
keep_checkpoints = (10000, 20000, 30000, 40000, 50000, 60000)
