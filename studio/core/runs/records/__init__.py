"""A run's record read back: its history entry, imported runs, the run model, smoothing, phase times and outcome line."""
