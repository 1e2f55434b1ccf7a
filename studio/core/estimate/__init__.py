"""What a run needs: the VRAM estimate (one function per memory part), fixes, the batch plan, throughput."""
