"""Data: the on-disk dataset format, batch order, tokenizers, datasets made from one text."""
