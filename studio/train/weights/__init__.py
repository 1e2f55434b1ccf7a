"""What the trainer keeps of the trained weights beside them: their exponential moving average."""
