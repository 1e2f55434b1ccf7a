"""The adapters a LoRA run trains: peft's LoRA (also on convolution layers: LoCon), LoHa and LoKr,
and the LyCORIS files ComfyUI, A1111/Forge and kohya's sd-scripts load."""
