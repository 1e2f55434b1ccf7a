"""Captions: their files, sources, tags, edits, the guard against lost edits, and auto-captioning."""
