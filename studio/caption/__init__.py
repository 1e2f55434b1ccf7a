"""Auto-captioning: captioning and tagging models that run in `studio-train caption`, never in the window."""
