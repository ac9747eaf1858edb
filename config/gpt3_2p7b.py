# The ladder's GPT-3 2.7B rung: the shape, batch and learning rate of GPT-3's row (Brown et al. 2020,
# Table 2.1: 32 layers, d_model 2560, 32 heads of 80, 1M-token batches, lr 1.6e-04) at this project's block
# of 1024 and vocab 50304, trained for about 20 tokens per parameter (Hoffmann et al. 2022, the
# compute-optimal ratio; 2.7B parameters): 55,000 steps x 983,040 tokens = 54.1B tokens. Warmup
# is GPT-3's 375M tokens, the cosine decays to lr/10 at the last step (as every arm here), weight decay 0.1,
# AdamW (0.9, 0.95), clip 1 (GPT-3's). Every arm of this size imports this file: config/owt_2p7b_*.py.
#   torchrun --standalone --nproc_per_node=8 train.py config/owt_2p7b_nlq.py
#   python train.py config/owt_2p7b_nlq.py --dry_run=8      # memory per GPU under DDP and FSDP
from config.owt_baseline import *  # noqa: F401,F403

# Past the paper's scale: this project's initialisation and batch order (its index files hold GPT-2 small's
# 480 rows per step and 60k steps; its initialisation replay draws every weight twice on the host).
init_order = "project"
sampling = "random"
eval_order = "fixed"

wandb_group = "owt-gpt3-2p7b"
n_layer = 32
n_head = 32
n_embd = 2560
parallelism = "fsdp"

batch_size = 8
gradient_accumulation_steps = 120  # total over all processes: 15 per GPU on 8 GPUs
max_iters = 55000
lr_decay_iters = 55000
warmup_iters = 381
learning_rate = 0.00016
min_lr = learning_rate / 10
eval_iters = 300  # 300 x 8 = 2400 validation windows, as at GPT-2 small
keep_checkpoints = ()
