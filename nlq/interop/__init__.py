"""Other formats: pretrained weights in, the Hugging Face export out (hf/: its modeling code)."""
