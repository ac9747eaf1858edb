"""The modeling code shipped with a Hugging Face export (export.py --format=hf): copied beside the weights."""
