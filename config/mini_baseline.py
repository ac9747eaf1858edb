# The CPU miniature of arXiv 2603.13381's table (docs/miniature.md): the quick-start shape (4 layers,
# 4 heads, 128 wide, block 64, 2000 steps of 768 tokens) on the generated play. Every mini_* arm imports
# this file, so all see the same batches; their learning rates keep the paper's ratios to its baseline.
#   python data/synthetic_char/prepare.py && python sweep.py config/mini_*.py --seeds=1,2,3 --out_root=out-mini
from config.quickstart import *  # noqa: F401,F403

out_dir = "out-mini-baseline"
wandb_run_name = "baseline"
