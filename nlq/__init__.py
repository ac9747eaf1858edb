"""The machinery behind the commands at the repository's root, one sub-package per concern. Imports run one
way, each floor using only the floors below it (model.py and configurator.py stay at the root, as in
nanoGPT, and import torch, the standard library and nlq.common alone):

- common: what every part uses (user errors, config-field domains, atomic writes, figures, the hub switch,
  safe loading of pickled files, whether a model fits in memory, the repository's own paths)
- model.py, configurator.py
- data: the on-disk dataset format, batch order, tokenizers, datasets made from one text, the synthetic
  tasks and their key-blind floors
- eval: how a model is scored (accuracy, zero-shot scoring and its task data, latency, the blind review)
- interop: other formats' weights in, the Hugging Face export out (hf/: its modeling code)
- paper: arXiv 2603.13381's official artifacts (checkpoints, initialisation, loss logs)
- run: a training run's life (its config, inputs, optimizer step, trainer, checkpoints, parallelism, memory,
  hardware, export)
- inference: what is done with a trained model (sampling, zero-shot evaluation, the harness adapter, the
  content skip's norms)
- bench, comparison: what things cost (bench.py, gpu_check.py, ...); comparisons of runs (compare, the
  sweep, the tuned protocol, the screen, the verdict)

Each root script parses its arguments and makes one call into this package.
"""
