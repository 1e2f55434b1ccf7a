"""The rules a config must keep: each section's checks, which settings act, what sharding wraps."""
