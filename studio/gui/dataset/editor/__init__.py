"""The caption editor beside the grid: one image's preview (decoded off the GUI thread, its loss mask), its caption."""
