"""training.compile = "blocks": the tiny families train as they do eagerly, with a `compiling` phase.

On the CPU torch's inductor writes C++ kernels and builds them with the system compiler, about a
minute per tiny family on two busy cores: one test builds them for a denoiser of two small repeated
blocks through the trainer's own call (kernels kept in the studio's cache, gradients equal to eager's);
the families and set-ups trace, split and run the same graphs with torch's own kernels
(STUDIO_COMPILE_BACKEND=aot_eager), which is where a family's or a set-up's compile problems show.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import MethodSection, SamplingSection, TrainingSection
from studio.core.runs.events import Phase, RunFinished, Sample, Step
from studio.core.user_dirs import cache_dir

torch = pytest.importorskip("torch")

CACHED = {"cache_latents": True, "cache_text_embeddings": True}


def _train_both(family: str, make_config, run_training, events_of, tmp_path: Path, **sections):
    """(eager events, compiled events) of the same tiny run."""
    training: TrainingSection = sections.pop("training")
    _, eager_run = run_training(make_config(family, training=training, **sections), tmp_path / "eager")
    compiled = training.model_copy(update={"compile": "blocks"})
    code, compiled_run = run_training(make_config(family, training=compiled, **sections), tmp_path / "compiled")
    assert code == 0, [e for e in events_of(compiled_run) if e.type == "error"]
    return events_of(eager_run), events_of(compiled_run)


def _losses(events) -> list[float]:
    return [e.loss for e in events if isinstance(e, Step)]


def _assert_compiled_like_eager(eager, compiled) -> None:
    assert len(_losses(compiled)) == len(_losses(eager)) > 0
    # Fused C++ kernels round differently from eager ones; the curve stays the same.
    assert _losses(compiled) == pytest.approx(_losses(eager), rel=2e-3, abs=2e-4)
    phases = [e for e in compiled if isinstance(e, Phase) and e.name == "compiling"]
    assert [p.done for p in phases] == [0, 1]
    assert "blocks" in phases[0].message and phases[1].elapsed_s is not None and phases[1].elapsed_s > 0
    assert not any(isinstance(e, Phase) and e.name == "compiling" for e in eager)
    assert isinstance(compiled[-1], RunFinished) and compiled[-1].status == "completed"


# A denoiser of two repeated blocks, compiled by the trainer's own call with torch's C++ kernel compiler, as a
# trainer process would: kernels, numbers and the compiler's worker processes are what inductor adds to a run.
INDUCTOR_RUN = """
import os, sys, torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
os.environ["TORCHINDUCTOR_CACHE_DIR"] = default_cache_dir()  # what a trainer finds once diffusers is imported
from studio.train.compilation import compile_cache_dir, compile_denoiser, shutdown_compile_workers

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)
    def forward(self, x):
        return x + torch.relu(self.fc(x))

class Denoiser(torch.nn.Module):
    _repeated_blocks = ("Block",)
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

torch.manual_seed(0)
eager, compiled = Denoiser(), Denoiser()
compiled.load_state_dict(eager.state_dict())
what = compile_denoiser(compiled, "blocks")
x = torch.randn(4, 8, 32)
for model in (eager, compiled):
    model(x).square().mean().backward()
print("WHAT", what.what)
print("GRAD", max((a.grad - b.grad).abs().max().item() for a, b in zip(eager.parameters(), compiled.parameters())))
print("CACHE", compile_cache_dir())
shutdown_compile_workers(what)
import multiprocessing
print("CHILDREN", len(multiprocessing.active_children()))
"""


@pytest.mark.slow
def test_inductor_builds_the_blocks_kernels_into_the_studios_cache(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", STUDIO_COMPILE_BACKEND="inductor")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", INDUCTOR_RUN], env=env, capture_output=True, text=True,
                          timeout=scaled_s(300))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    assert said["WHAT"] == "2 Block blocks"
    assert float(said["GRAD"]) < 1e-5  # the C++ kernels' gradients are eager's
    # The kernels went to the studio's cache folder (where the next run finds them), not to /tmp.
    assert said["CACHE"] == str(cache_dir() / "torch-compile")
    assert len([p for p in (cache_dir() / "torch-compile").rglob("*.so") if p.is_file()]) >= 2
    assert said["CHILDREN"] == "0"  # the compiler's workers ended with the run


@pytest.mark.slow
@pytest.mark.parametrize("family", ["sdxl", "sd3"])
def test_compiled_blocks_train_like_eager(family, make_config, run_training, events_of, tmp_path,
                                         monkeypatch) -> None:
    monkeypatch.setenv("STUDIO_COMPILE_BACKEND", "aot_eager")
    eager, compiled = _train_both(
        family, make_config, run_training, events_of, tmp_path,
        training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-3, seed=1, **CACHED),
    )
    _assert_compiled_like_eager(eager, compiled)


@pytest.mark.slow
def test_compiled_blocks_full_finetune_with_checkpointing(make_config, run_training, events_of, tmp_path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("STUDIO_COMPILE_BACKEND", "aot_eager")
    eager, compiled = _train_both(
        "sd15", make_config, run_training, events_of, tmp_path,
        method=MethodSection(kind="dreambooth"),
        training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-5, seed=1, gradient_checkpointing=True,
                                 **CACHED),
        sampling=SamplingSection(every_n_steps=3, prompts=["a red circle"], steps=2),
    )
    _assert_compiled_like_eager(eager, compiled)
    # Samples run the compiled modules eagerly (their shapes would compile again for a few images).
    samples = [e for e in compiled if isinstance(e, Sample)]
    assert len(samples) == 1 and Path(samples[0].images[0]).is_file()


@pytest.mark.slow
def test_compiled_blocks_under_two_ranks(make_config, events_of, tmp_path) -> None:
    import os
    import subprocess

    from studio.core.runs.launch import prepare_run

    config = make_config(training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-3, seed=1,
                                                  compile="blocks", **CACHED))
    plan = prepare_run(resolve_paths(config, tmp_path), num_processes=2)
    cache = str(tmp_path / "cache")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", STUDIO_CACHE_DIR=cache,
               STUDIO_COMPILE_BACKEND="aot_eager")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run(plan.command, env=env, capture_output=True, text=True, timeout=scaled_s(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = events_of(plan.run_dir)
    assert [p.done for p in events if isinstance(p, Phase) and p.name == "compiling"] == [0, 1]
    assert [e.step for e in events if isinstance(e, Step)] == [1, 2, 3]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    assert len(finished.weight_checksums) == 2 and finished.weight_checksums[0] == finished.weight_checksums[1]


def test_the_blocks_its_class_does_not_name_come_from_the_familys_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from diffusers import SD3Transformer2DModel

    from studio.core.families import FAMILIES
    from studio.train.compilation import compile_denoiser
    from studio.train.errors import TrainError

    declared = next(spec for spec in FAMILIES if "JointTransformerBlock" in spec.repeated_blocks)
    denoiser = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2,
                                     attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                     caption_projection_dim=16, pooled_projection_dim=16, pos_embed_max_size=8)
    assert not getattr(denoiser, "_repeated_blocks", None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # nothing compiles: no forward runs
    compiled = compile_denoiser(denoiser, "blocks", declared.name)
    assert compiled is not None and compiled.what == "2 JointTransformerBlock blocks"
    with pytest.raises(TrainError, match="no repeated blocks"):
        compile_denoiser(SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, out_channels=4,
                                               num_layers=1, attention_head_dim=8, num_attention_heads=2,
                                               joint_attention_dim=16, caption_projection_dim=16,
                                               pooled_projection_dim=16, pos_embed_max_size=8), "blocks")


def test_an_unknown_compile_backend_is_refused_with_the_choices(monkeypatch) -> None:
    from studio.train.compilation import compile_denoiser
    from studio.train.errors import TrainError

    monkeypatch.setenv("STUDIO_COMPILE_BACKEND", "tensorrt")
    with pytest.raises(TrainError) as refused:
        compile_denoiser(torch.nn.Linear(2, 2), "full")
    assert "'tensorrt'" in refused.value.message and "inductor, aot_eager, eager" in refused.value.hint
