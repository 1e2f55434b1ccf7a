"""Training studio for Stable Diffusion fine-tuning."""

__version__ = "0.1.0"
