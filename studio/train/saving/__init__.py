"""Checkpoints: saved, checked for damage, and the newest intact one chosen to resume from."""
