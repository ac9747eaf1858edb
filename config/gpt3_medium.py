# The ladder's GPT-3 Medium (350M) rung: the shape, batch and learning rate of GPT-3's row (Brown et al. 2020,
# Table 2.1: 24 layers, d_model 1024, 16 heads of 64, 0.5M-token batches, lr 3.0e-04) at this project's block
# of 1024 and vocab 50304, trained for about 20 tokens per parameter (Hoffmann et al. 2022, the
# compute-optimal ratio; 350M parameters): 14,300 steps x 491,520 tokens = 7.0B tokens. Warmup
# is GPT-3's 375M tokens, the cosine decays to lr/10 at the last step (as every arm here), weight decay 0.1,
# AdamW (0.9, 0.95), clip 1 (GPT-3's). Every arm of this size imports this file: config/owt_medium_*.py.
#   torchrun --standalone --nproc_per_node=8 train.py config/owt_medium_nlq.py
#   python train.py config/owt_medium_nlq.py --dry_run=8      # memory per GPU under DDP and FSDP
from config.owt_baseline import *  # noqa: F401,F403

# Past the paper's scale: this project's initialisation and batch order (its index files hold GPT-2 small's
# 480 rows per step and 60k steps; its initialisation replay draws every weight twice on the host).
init_order = "project"
sampling = "random"
eval_order = "fixed"

wandb_group = "owt-gpt3-medium"
n_layer = 24
n_head = 16
n_embd = 1024
parallelism = "fsdp"

batch_size = 12
gradient_accumulation_steps = 40  # total over all processes: 5 per GPU on 8 GPUs
max_iters = 14300
lr_decay_iters = 14300
warmup_iters = 763
learning_rate = 0.0003
min_lr = learning_rate / 10
eval_iters = 200  # 200 x 12 = 2400 validation windows, as at GPT-2 small
keep_checkpoints = ()
