"""The lowest core layer: typed JSON-lines messages, the one tail of a growing file, streamed commands.

Everything that runs elsewhere (the trainer, the captioner, a download, a remote machine)
talks to the studio in lines; this folder reads and checks them, once, the same way for all.
"""
