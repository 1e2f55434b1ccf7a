"""A run sharded over several GPUs (FSDP): its estimate and parts."""
