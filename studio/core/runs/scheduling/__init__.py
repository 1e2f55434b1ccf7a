"""Runs waiting their turn: the queue, sweeps, the queue's lock and the step hold a test or a person sets."""
