"""Sample images decoded tile by tile when sampling.vae_tiling asks for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import SamplingSection, TrainingSection

torch = pytest.importorskip("torch")


def _count_tiled_decodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    from diffusers import AutoencoderKL

    calls: list[tuple[int, int]] = []
    tiled_decode = AutoencoderKL.tiled_decode

    def counted(self: Any, z: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((self.tile_sample_min_size, int(z.shape[-1])))
        return tiled_decode(self, z, *args, **kwargs)

    monkeypatch.setattr(AutoencoderKL, "tiled_decode", counted)
    return calls


@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_run_decodes_its_samples_in_tiles_when_asked(mode: str, make_config, run_training, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_tiled_decodes(monkeypatch)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=1, seed=1, cache_latents=True),
                         sampling=SamplingSection(every_n_steps=1, prompts=["a red circle"], steps=2, size=128,
                                                  vae_tiling=mode))  # type: ignore[arg-type]
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    image = np.asarray(Image.open(run_dir / "samples" / "step-000001-0.png"))
    assert image.shape == (128, 128, 3) and image.std() > 0
    # The tiny VAE's tile is 64 px (8 latents); a 128 px sample is four of them, blended.
    assert calls == ([(64, 16)] if mode == "on" else [])


def test_tiling_is_switched_off_again_after_the_samples(tiny_sd15: Path) -> None:
    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.samples import decode_tiled

    vae = adapter_for(TrainConfig(model=ModelSection(family="sd15", base=str(tiny_sd15)))).load(
        torch.device("cpu"), torch.float32).vae
    before = (vae.use_tiling, vae.use_slicing, vae.tile_sample_min_size, vae.tile_latent_min_size)
    with decode_tiled(vae, True):
        assert vae.use_tiling and vae.use_slicing
    assert (vae.use_tiling, vae.use_slicing, vae.tile_sample_min_size, vae.tile_latent_min_size) == before


def test_a_vae_tiled_by_height_and_width_decodes_in_tiles_and_is_put_back(tiny_model, monkeypatch) -> None:
    """Qwen-Image's VAE keeps a tile height, width and stride (not AutoencoderKL's one side): a sample
    larger than its tile is decoded tile by tile, the picture matches the whole decode, and the VAE's
    settings are its own again after the samples."""
    from diffusers import AutoencoderKLQwenImage

    from studio.train.samples import decode_tiled

    vae = AutoencoderKLQwenImage.from_pretrained(tiny_model("qwen-image") / "vae").eval()
    names = ("use_tiling", "use_slicing", "tile_sample_min_height", "tile_sample_min_width",
             "tile_sample_stride_height", "tile_sample_stride_width")
    before = {name: getattr(vae, name) for name in names}
    calls: list[tuple[int, ...]] = []
    tiled_decode = AutoencoderKLQwenImage.tiled_decode

    def counted(self: Any, z: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(z.shape[-2:]))
        return tiled_decode(self, z, *args, **kwargs)

    monkeypatch.setattr(AutoencoderKLQwenImage, "tiled_decode", counted)
    torch.manual_seed(0)
    latents = torch.randn(1, vae.config.z_dim, 1, 48, 48)  # a 384 px picture
    with torch.no_grad():
        whole = vae.decode(latents).sample
        with decode_tiled(vae, True):
            assert vae.use_tiling and vae.use_slicing
            tiled = vae.decode(latents).sample
    assert calls == [(48, 48)]
    assert tiled.shape == whole.shape == (1, 3, 1, 384, 384)
    assert (tiled - whole).abs().mean() < 0.1 * whole.abs().mean()  # tiles blended at their overlaps
    assert {name: getattr(vae, name) for name in names} == before
