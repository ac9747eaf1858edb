# The synthetic screen's model and training (screen.py, docs/screening.md): a 2-layer GPT, 64 wide, 2 heads,
# rotary positions, 64 examples a step, AdamW with cosine decay to a tenth. The screen sets each run's data,
# context, vocabulary and length per task setting and tunes the learning rate; every synth_* arm imports
# this file, so all read the same examples in the same order.
#   python screen.py config/synth_*.py
n_layer = 2
n_head = 2
n_embd = 64
pos_embedding = "rotary"
dropout = 0.0
bias = False
batch_size = 64
gradient_accumulation_steps = 1
learning_rate = 1e-3
weight_decay = 0.1
eval_iters = 20  # training-loss sample: 20 x 64 examples
log_interval = 50
always_save_checkpoint = False  # ckpt.pt: the evaluation of the lowest loss, not always the last step
compile = False  # runs of a minute or two: compiling would take longer than it saves on a CPU
dtype = "float32"  # the same precision on every CPU (dtype='auto' chooses per machine)
out_dir = "out-synth-baseline"
wandb_run_name = "baseline"
