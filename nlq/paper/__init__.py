"""arXiv 2603.13381's official artifacts: its checkpoints, initialisation and loss logs."""
