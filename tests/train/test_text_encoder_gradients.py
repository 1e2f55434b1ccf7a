"""Every weight a run trains gets a gradient at every step: data-parallel training (several GPUs) refuses the run
at its second step otherwise. Text-encoder layers after the hidden state a family reads (SDXL's first encoder's
last layer, SD1.5's with model.clip_skip) are left out of a LoRA and kept frozen in a full fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import MethodSection, ModelSection, OutputSection, TrainingSection

torch = pytest.importorskip("torch")

CASES = {
    "sdxl dreambooth, both encoders": ("sdxl", "dreambooth", 1),
    "sd15 dreambooth, clip_skip 2": ("sd15", "dreambooth", 2),
    "sd15 lora, clip_skip 2": ("sd15", "lora", 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_trained_weight_gets_a_gradient(case: str, make_config, run_training,
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from accelerate import Accelerator
    from safetensors.torch import load_file

    family, kind, clip_skip = CASES[case]
    base = make_config(family).model.base
    without: list[int] = []
    clip = Accelerator.clip_grad_norm_

    def record(self: Any, parameters: Any, *args: Any, **kwargs: Any) -> Any:
        parameters = list(parameters)
        without.append(sum(p.grad is None for p in parameters))
        return clip(self, parameters, *args, **kwargs)

    monkeypatch.setattr(Accelerator, "clip_grad_norm_", record)
    config = make_config(family, model=ModelSection(family=family, base=base, clip_skip=clip_skip),
                         method=MethodSection(kind=kind, train_text_encoder=True),
                         training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"], save_precision="fp32"))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    assert without == [0]
    if kind == "dreambooth":  # the frozen layers are still in the model, as the base has them
        output = load_file(str(run_dir / "output" / "text_encoder" / "model.safetensors"))
        original = load_file(str(Path(base) / "text_encoder" / "model.safetensors"))
        assert output.keys() == original.keys()
        last = [k for k in original if ".layers.1." in k]
        assert last and all(torch.equal(output[k], original[k]) for k in last)
        first = [k for k in original if ".layers.0." in k]  # and the layers that feed the UNet trained
        assert first and not any(torch.equal(output[k], original[k]) for k in first)
