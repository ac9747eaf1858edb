"""The machinery behind the scripts at the repository's root, one sub-package per concern; imports run
from the scripts down, never back up:

- common: what every part uses (user errors, config-field domains, atomic writes, figures, the hub switch,
  safe loading of pickled files)
- data: the on-disk dataset format, batch order, tokenizers, datasets made from one text
- run: a training run's life (how it starts, its out_dir, checkpoints, parallelism, memory, hardware)
- paper: arXiv 2603.13381's official artifacts (checkpoints, initialisation, loss logs)
- eval: zero-shot scoring, its task data, the lm-evaluation-harness adapter
- comparison: statistics, the tuned two-stage comparison, cluster jobs
- interop: other formats' weights in, the Hugging Face export out (hf/: its modeling code)

model.py and configurator.py stay at the root, as in nanoGPT.
"""
