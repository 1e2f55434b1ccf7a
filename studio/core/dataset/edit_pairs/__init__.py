"""Edit pairs: a target image, its control (reference) images and an instruction (the target's caption)."""
