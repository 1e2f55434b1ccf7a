"""System memory (RAM) of a run: the estimate and its parts."""
