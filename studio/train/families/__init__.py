"""Model families: one adapter module per family."""
