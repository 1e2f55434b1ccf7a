"""Reading the dataset off the GUI thread: listing, captions, the check, and the helper process that checks."""
