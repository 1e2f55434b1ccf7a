"""Reading a run's events.jsonl when it is long: its two ends for a glance, the whole of it streamed."""
