"""The trainer: runs inside `accelerate launch`; imports torch, diffusers and peft."""
