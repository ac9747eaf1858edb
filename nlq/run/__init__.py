"""A training run's life: how it starts, its out_dir, checkpoints, parallelism, memory and hardware."""
