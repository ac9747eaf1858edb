"""Evaluation: zero-shot scoring, its task data, the lm-evaluation-harness adapter."""
