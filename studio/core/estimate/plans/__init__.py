"""Plans made from the estimate: the batch that fits, the card filled, the fixes that make a run fit, a preset's estimate."""
