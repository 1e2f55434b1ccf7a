"""Which program each output file of a run is for, in the words of docs/index.md's "Which file to load where":
the diffusers-format LoRA for diffusers, the kohya-format and LyCORIS files for the programs the family's
declaration names, a DreamBooth folder for diffusers and its single-file checkpoint for the UIs."""

from __future__ import annotations

from pathlib import Path

from studio.core.families.registry import UnknownFamily, family

DIFFUSERS_LORA = "pytorch_lora_weights"
# The diffusers-format files by their whole names: a run named after them (output.name = "pytorch_lora_weights")
# writes its kohya-format files as pytorch_lora_weights-kohya, -ema and -e0002.safetensors, which are not for diffusers.
DIFFUSERS_FILES = (f"{DIFFUSERS_LORA}.safetensors", f"{DIFFUSERS_LORA}_ema.safetensors")
LYCORIS_NETWORKS = ("loha", "lokr")
DORA_ELSEWHERE = "A1111 and older Forge apply its DoRA scales wrongly"


def readers_of(output: str | Path, family_name: str, method: str = "lora", network: str = "lora",
               dora: bool = False) -> str:
    """The programs that load `output` (a file or folder a run wrote), or "" when the studio cannot say."""
    path = Path(output)
    if path.name in DIFFUSERS_FILES:
        return "diffusers (load_lora_weights)"
    if path.suffix != ".safetensors":
        return "diffusers (from_pretrained)" if method == "dreambooth" and not path.suffix else ""
    if method == "dreambooth":
        return "A1111/Forge and ComfyUI (a checkpoint)"
    try:
        spec = family(family_name)
    except UnknownFamily:
        return ""
    if network in LYCORIS_NETWORKS:
        return spec.lycoris_readers
    if dora:
        # The DoRA magnitudes (`dora_scale`, one per output row) are merged exactly by ComfyUI and by Forge since
        # it took ComfyUI's code for them (May 2025). A1111 and older Forge read a dora_scale as one per input
        # column: such a file loads there without a word, and every weight of its layers comes out wrong.
        readers = " and ".join(reader for reader in ("ComfyUI", "Forge") if reader in spec.kohya_readers)
        return readers.replace("Forge", f"Forge of May 2025 or newer ({DORA_ELSEWHERE})")
    return spec.kohya_readers
