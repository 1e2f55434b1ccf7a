"""The trained networks themselves: what a step trains is what the samples and the file apply.

With method.dropout, a LoHa and a LoKr drop whole rows of their weight difference while training; the kept
rows are scaled up so that the average change training sees is the whole change the samples (eval mode) and
the written file apply, as a LoRA's dropout is.
"""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import MethodSection

torch = pytest.importorskip("torch")


def _adapted_linear(network: str, dropout: float) -> Any:
    from peft import inject_adapter_in_model

    from studio.train.networks.lycoris import adapter_config

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    method = MethodSection(network=network, rank=4, dropout=dropout)
    inject_adapter_in_model(adapter_config(method, ["0"], 4, 4.0), model)
    with torch.no_grad():  # a trained network: every factor away from its zero start
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.normal_(std=0.5)
    return model


@pytest.mark.parametrize("network", ["loha", "lokr"])
def test_dropout_trains_the_strength_the_samples_apply(network: str) -> None:
    model = _adapted_linear(network, dropout=0.5)
    x = torch.randn(8, 64)
    with torch.no_grad():
        base = model[0].get_base_layer()(x)
        model.eval()
        applied = model(x) - base  # the change a sample (and the written file) makes
        model.train()
        trained = torch.stack([model(x) - base for _ in range(400)]).mean(0)  # what the steps saw, on average
    ratio = float((trained * applied).sum() / (applied * applied).sum())
    assert ratio == pytest.approx(1.0, abs=0.1), f"training saw {ratio:.2f} of the {network}'s applied strength"


def _tiny_unet() -> Any:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, norm_num_groups=8, attention_head_dim=4)


@pytest.mark.parametrize(("targets", "words", "hint"), [
    (["to_q", "to_kk"], "names \"to_kk\", which is no layer of the unet", "to_out.0 in attention"),
    (["to_qq"], "names \"to_qq\", which is no layer of the unet", "leave method.target_modules empty"),
    (["to_q", "to_out"], "names \"to_out\", a ModuleList", "name the layers inside it (to_out.0)"),
    (["attn1"], "names \"attn1\", a Attention", "(attn1.to_q, attn1.to_k, attn1.to_v, attn1.to_out.0)"),
])
def test_a_target_module_that_wraps_no_layer_is_refused_with_what_to_do(make_config: Any, targets: list[str],
                                                                        words: str, hint: str) -> None:
    """A typo in method.target_modules trained fewer layers than asked without a word (when another name matched)
    or ended the run with a traceback; so did a block or a list of layers."""
    from types import SimpleNamespace

    from studio.train.errors import TrainError
    from studio.train.families import adapter_for

    adapter = adapter_for(make_config(method=MethodSection(target_modules=targets)))
    with pytest.raises(TrainError) as refused:
        adapter.add_lora(SimpleNamespace(denoiser=_tiny_unet(), text_encoders=[]))  # type: ignore[arg-type]
    assert refused.value.kind == "config"
    assert words in refused.value.message
    assert hint in refused.value.hint


def test_target_modules_that_name_layers_wrap_them(make_config: Any) -> None:
    from types import SimpleNamespace

    from studio.train.families import adapter_for

    unet = _tiny_unet()
    adapter = adapter_for(make_config(method=MethodSection(target_modules=["to_q", "to_out.0", "proj_in"])))
    adapter.add_lora(SimpleNamespace(denoiser=unet, text_encoders=[]))  # type: ignore[arg-type]
    from studio.train.networks.lycoris import adapter_scales

    wrapped = set(adapter_scales(unet))
    assert "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q" in wrapped
    assert "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0" in wrapped
    assert "down_blocks.0.attentions.0.proj_in" in wrapped


def test_sd3_blocks_wrap_the_target_modules_named_as_without_blocks(make_config: Any) -> None:
    """With method.blocks a bare name ("to_q") was joined to the block's (transformer_blocks.1.to_q, no layer): with
    another name beside it that one was trained alone without a word, alone it ended the run with a traceback."""
    from types import SimpleNamespace

    from diffusers import SD3Transformer2DModel

    from studio.train.families import adapter_for
    from studio.train.networks.lycoris import adapter_scales

    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=3, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=16, out_channels=4)
    adapter = adapter_for(make_config("sd3", method=MethodSection(blocks=[1], target_modules=["to_q", "attn.to_k"])))
    adapter.add_lora(SimpleNamespace(denoiser=transformer, text_encoders=[]))  # type: ignore[arg-type]
    assert sorted(adapter_scales(transformer)) == ["transformer_blocks.1.attn.to_k", "transformer_blocks.1.attn.to_q"]


def test_sd3_blocks_with_target_modules_outside_them_are_refused(make_config: Any) -> None:
    from types import SimpleNamespace

    from diffusers import SD3Transformer2DModel

    from studio.train.errors import TrainError
    from studio.train.families import adapter_for

    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=16, out_channels=4)
    adapter = adapter_for(make_config("sd3", method=MethodSection(blocks=[0], target_modules=["context_embedder"])))
    with pytest.raises(TrainError) as refused:
        adapter.add_lora(SimpleNamespace(denoiser=transformer, text_encoders=[]))  # type: ignore[arg-type]
    assert "names no layer inside the blocks method.blocks chooses (0)" in refused.value.message
