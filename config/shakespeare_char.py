# CPU quick start: a small character-level model on tiny shakespeare, a few minutes on a laptop CPU.
# The shape is nanoGPT's CPU quick start (4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 iters,
# dropout 0), so its val loss (about 1.88) is a sanity reference. Try --query_mode=residual_gelu.
#   python data/shakespeare_char/prepare.py && python train.py config/shakespeare_char.py
out_dir = "out-shakespeare-char"
dataset = "shakespeare_char"
vocab_size = 65  # the characters of tiny shakespeare (prepare.py prints it)
block_size = 64
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
batch_size = 12
gradient_accumulation_steps = 1
learning_rate = 1e-3  # small models tolerate a larger rate
min_lr = 1e-4
beta2 = 0.99  # few tokens per step
warmup_iters = 100
max_iters = 2000
eval_interval = 250
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False
