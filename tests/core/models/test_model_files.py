"""Reading what a base model is from its folder's JSON or its checkpoint's header (no torch)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from fixtures.checkpoints import CONV_IN, SD3_WITHOUT_CLIPS, SD15, TO_K, UNET, write_checkpoint

from studio.core.models.files import ModelFileError, detect_model, read_safetensors_header


def test_the_header_gives_names_and_shapes_without_the_weights(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "m.safetensors", SD15)
    shapes = read_safetensors_header(path)
    assert shapes == SD15  # __metadata__ is not a tensor


def test_an_sd15_checkpoint_is_recognised_and_loads_offline(tmp_path: Path) -> None:
    info = detect_model(write_checkpoint(tmp_path / "realistic-v5.safetensors", SD15))
    assert (info.family, info.kind, info.offline, info.refused) == ("sd15", "v1", True, None)
    assert info.label == "Stable Diffusion 1.x checkpoint"


def test_an_sd2_checkpoint_needs_the_hub_and_an_inpainting_one_is_refused(tmp_path: Path) -> None:
    v2 = {**SD15, TO_K: [320, 1024]}
    info = detect_model(write_checkpoint(tmp_path / "v2.safetensors", v2))
    assert (info.family, info.kind, info.offline) == ("sd15", "v2", False)
    inpaint = {**SD15, CONV_IN: [320, 9, 3, 3]}
    info = detect_model(write_checkpoint(tmp_path / "inpaint.safetensors", inpaint))
    assert info.kind == "inpainting" and "text-to-image" in (info.refused or "")


def test_a_checkpoint_without_its_text_encoders_or_vae_says_so(tmp_path: Path) -> None:
    sd3 = detect_model(write_checkpoint(tmp_path / "sd3_medium.safetensors", SD3_WITHOUT_CLIPS))
    assert (sd3.family, sd3.kind) == ("sd3", "sd3")
    assert sd3.refused is not None
    assert "no text encoder (text_encoders.clip_l, text_encoders.clip_g)" in sd3.refused
    assert "sd3_medium_incl_clips.safetensors" in sd3.refused
    unet_only = {k: v for k, v in SD15.items() if not k.startswith("first_stage_model.")}
    info = detect_model(write_checkpoint(tmp_path / "no-vae.safetensors", unet_only))
    assert info.kind == "v1" and "holds no VAE" in (info.refused or "")


def test_a_file_of_no_known_kind_still_names_its_family_from_tensor_names(tmp_path: Path) -> None:
    odd = {CONV_IN: [320, 4, 3, 3], "cond_stage_model.x": [1]}
    info = detect_model(write_checkpoint(tmp_path / "odd.safetensors", odd))
    assert (info.family, info.kind) == ("sd15", None)
    lora = detect_model(write_checkpoint(tmp_path / "lora.safetensors", {"lora_unet_x.lora_down.weight": [4, 320]}))
    assert lora.family is None and "match no known family" in lora.evidence


@pytest.mark.parametrize(("content", "says"), [
    (b"", "too short to be a .safetensors file"),
    (struct.pack("<Q", 2**40) + b"{}", "header length"),
    (struct.pack("<Q", 50) + b'{"a": {"dtype": "F16", "sha', "is cut short"),
    (struct.pack("<Q", 8) + b'{"a": [1', "damaged header"),
    (b"PK\x03\x04" + bytes(40), "rename it to .ckpt"),  # a .ckpt (zip) renamed to .safetensors
])
def test_a_damaged_file_is_named_with_what_is_wrong(content: bytes, says: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelFileError) as raised:
        detect_model(path)
    assert str(path) in str(raised.value) and says in str(raised.value)


def test_folders_are_recognised_from_their_json(tmp_path: Path) -> None:
    xl = tmp_path / "xl"
    (xl / "unet").mkdir(parents=True)
    (xl / "model_index.json").write_text(json.dumps({"_class_name": "MyMergedPipeline"}))
    (xl / "unet" / "config.json").write_text(json.dumps({"addition_embed_type": "text_time"}))
    info = detect_model(xl)
    assert (info.family, info.kind, info.offline) == ("sdxl", None, True)
    assert info.label == "SDXL model"
    sd3 = tmp_path / "sd3"
    sd3.mkdir()
    (sd3 / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    assert detect_model(sd3).family == "sd3"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model_index.json").write_text("{ not json")
    with pytest.raises(ModelFileError, match=r"model_index\.json is not valid JSON"):
        detect_model(broken)


def test_studio_train_model_says_what_a_file_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    good = write_checkpoint(tmp_path / "realistic-v5.safetensors", SD15)
    assert main(["model", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{good}: Stable Diffusion 1.x checkpoint"
    assert "family:  sd15" in out and "loads offline" in out

    sd3 = write_checkpoint(tmp_path / "sd3_medium.safetensors", SD3_WITHOUT_CLIPS)
    assert main(["model", str(sd3), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "sd3" and report["trainable"] is False and "no text encoder" in report["refused"]

    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:40])
    assert main(["model", str(cut)]) == 2
    assert "is cut short" in capsys.readouterr().err

    # A folder of checkpoints (ComfyUI's models/checkpoints) is no model: the command says which file to give.
    assert main(["model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} has no model_index.json, so it is no diffusers model folder" in err
    assert "it holds cut.safetensors, realistic-v5.safetensors, sd3_medium.safetensors: give one of them" in err


def test_v_prediction_and_zero_terminal_snr_markers_are_read(tmp_path: Path) -> None:
    plain = detect_model(write_checkpoint(tmp_path / "eps.safetensors", SD15))
    assert (plain.v_prediction, plain.zero_terminal_snr) == (False, False)
    marked = detect_model(write_checkpoint(tmp_path / "vpred.safetensors", {**SD15, "v_pred": [], "ztsnr": []}))
    assert (marked.v_prediction, marked.zero_terminal_snr) == (True, True)
    assert marked.label == "Stable Diffusion 1.x checkpoint (v-prediction, zero terminal SNR)"


@pytest.mark.parametrize(("shapes", "kind"), [
    ({CONV_IN: [320, 4, 3, 3], TO_K: [320, 768]}, "v1"),
    ({CONV_IN: [320, 9, 3, 3], TO_K: [320, 768]}, "inpainting"),
    ({CONV_IN: [320, 4, 3, 3], TO_K: [320, 1024]}, "v2"),
    ({CONV_IN: [320, 4, 3, 3], "conditioner.embedders.1.model.ln_final.weight": [1280]}, "xl_base"),
    ({CONV_IN: [384, 4, 3, 3], UNET + "label_emb.0.0.weight": [1536, 2560]}, "xl_refiner"),
    ({f"{UNET}joint_blocks.{i}.x_block.attn.qkv.weight": [1, 1] for i in range(24)}, "sd3"),
    ({f"{UNET}joint_blocks.{i}.x_block.attn.qkv.weight": [1, 1] for i in range(38)}, "sd35_large"),
    ({"first_stage_model.encoder.conv_in.weight": [128, 3, 3, 3]}, None),
])
def test_the_kind_of_a_checkpoint_is_read_from_its_header(shapes: dict[str, list[int]], kind: str | None,
                                                          tmp_path: Path) -> None:
    assert detect_model(write_checkpoint(tmp_path / "model.safetensors", shapes)).kind == kind
