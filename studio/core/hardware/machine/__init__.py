"""What the machine has: GPUs, CPU, RAM and disk, probed or read from a profile."""
