"""Run logs for other tools: the scalars and sample images of events.jsonl, written to TensorBoard or
Weights & Biases (`output.log_to`) by the trainer's rank 0 as it writes the events, or afterwards for
finished runs (`studio-train tensorboard RUN_DIR...`). Both libraries are optional (the `logging` extra).
"""
