# The settings every arm of a verdict shares (verdict.py): a small GPT a CPU trains in minutes on a folder
# of documents (4 layers, 4 heads, 128 wide, context 128, 16 rows a step, 2000 steps), dropout off. On a GPU,
# and for a model your use would ship, give larger ones on the command line (--n_layer=12 --n_embd=768 ...).
#   python verdict.py --data=my_docs/ --arms=linear,residual_gelu --out=verdict-mine
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
dropout = 0.0
batch_size = 16
gradient_accumulation_steps = 1
max_iters = 2000
lr_decay_iters = 2000
warmup_iters = 100
learning_rate = 1e-3
min_lr = 1e-4
weight_decay = 0.1
eval_interval = 200
eval_iters = 20
log_interval = 50
always_save_checkpoint = False  # ckpt.pt: the evaluation of the lowest validation loss, not always the last step
compile = False  # runs of minutes on a CPU: compiling would take longer than it saves
dtype = "float32"  # the same numbers on every CPU (dtype='auto' chooses per machine)
out_dir = "out-verdict"
