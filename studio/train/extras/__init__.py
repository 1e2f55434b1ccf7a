"""What a serious trainer adds around the loop: the validation loss and logs for other tools.

Each module is called from a hook line in the loop (or the entry), so the loop stays a loop.
"""
