"""model.clip_skip: SD1.5 prompts read from an earlier text-encoder layer, in training, samples and the LoRA file."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from studio.core.config.schema import (
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.runs.events import Error, Sample

torch = pytest.importorskip("torch")

CAPTIONS = ["a red circle on a blue background", "a green square"]


def _adapter(tiny_sd15: Path, clip_skip: int):  # type: ignore[no-untyped-def]
    from studio.train.families import adapter_for

    config = TrainConfig(model=ModelSection(family="sd15", base=str(tiny_sd15), clip_skip=clip_skip))
    adapter = adapter_for(config)
    return adapter, adapter.load(torch.device("cpu"), torch.float32)


def test_clip_skip_2_is_the_penultimate_layer_through_the_final_norm(tiny_sd15: Path) -> None:
    adapter, components = _adapter(tiny_sd15, 2)
    encoder, tokenizer = components.text_encoders[0], components.tokenizers[0]
    with torch.no_grad():
        skipped = adapter.encode_prompts(components, CAPTIONS)["encoder_hidden_states"]
        ids = tokenizer(CAPTIONS, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids
        out = encoder(ids, output_hidden_states=True)
        penultimate = encoder.final_layer_norm(out.hidden_states[-2])
        last = out.last_hidden_state
    assert torch.allclose(skipped, penultimate)
    assert not torch.allclose(skipped, last)  # it really is another layer
    # Samples are drawn with the same embeddings: the pipeline is handed them, not the prompt.
    arguments = adapter.sample_conditioning(adapter.make_pipeline(components), CAPTIONS[0], "blurry")
    assert set(arguments) == {"prompt_embeds", "negative_prompt_embeds"}
    assert torch.allclose(arguments["prompt_embeds"], penultimate[:1])


def test_clip_skip_beyond_the_encoders_layers_names_the_limit(tiny_sd15: Path) -> None:
    from studio.train.errors import TrainError

    adapter, components = _adapter(tiny_sd15, 3)  # the tiny encoder has 2 layers
    with pytest.raises(TrainError) as raised:
        adapter.encode_prompts(components, CAPTIONS)
    assert raised.value.message == "model.clip_skip = 3, but the text encoder has 2 layers"
    assert "between 1 and 2" in raised.value.hint


def test_a_clip_skip_run_samples_and_writes_it_into_the_kohya_file(make_config, run_training, events_of,
                                                                   tiny_sd15: Path, tmp_path: Path) -> None:
    config = make_config(model=ModelSection(family="sd15", base=str(tiny_sd15), clip_skip=2),
                         training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1),
                         sampling=SamplingSection(every_n_steps=2, prompts=[CAPTIONS[0]], steps=2),
                         output=OutputSection(dir=str(tmp_path / "runs"), name="skip", formats=["kohya"]))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if isinstance(e, Error)]
    assert any(isinstance(e, Sample) for e in events)
    with safe_open(str(run_dir / "output" / "skip.safetensors"), "pt") as handle:
        assert handle.metadata()["ss_clip_skip"] == "2"
