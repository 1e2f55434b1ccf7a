"""benchmarks/gpu_train_speed.py --dry-run: the GPU benchmark's code paths on the tiny models, on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fixtures.scripts import left_in, script_env
from fixtures.waits import scaled_s

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dry_run_measures_the_bare_step_and_the_studio_and_writes_the_table(tmp_path: Path) -> None:
    env, temp = script_env(tmp_path)
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_train_speed.py"), "--dry-run", "--only", "sd15",
               "--paths", "bare", "studio", "--warmup", "2", "--steps", "2",
               "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=scaled_s(600))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [(r["case"]["batch"], r["case"]["path"]) for r in results] == [
        (2, "bare"), (2, "studio"), (1, "bare"), (1, "studio")]
    for r in results:
        assert r["s_per_step"] > 0 and r["images_per_s"] == pytest.approx(r["case"]["batch"] / r["s_per_step"])
        assert r["mfu"] is None and not r["note"]  # no GPU peak on the CPU
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| sd15 | 64 | 2 | studio |" in table and "x |" in table  # the ratio to the bare step
    # the tiny model was built once, in the work folder the call names, and nothing was left in the temp folder
    assert sorted(p.name for p in (tmp_path / "work" / "models").iterdir()) == ["tiny-sd15"]
    assert left_in(temp) == []


@pytest.mark.slow
def test_a_case_past_its_timeout_is_stopped_noted_and_the_next_one_runs(tmp_path: Path) -> None:
    """The first case (cold: the trainer's imports, loading and caching; the tiny pipeline is built before its
    timeout starts) cannot end in 0.2 s and is stopped; the next one still runs. A warm second case may finish
    or be stopped too: how fast it is depends on the machine.
    Without --work the call works in a scratch folder and removes it, whatever its cases did."""
    env, temp = script_env(tmp_path)
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_train_speed.py"), "--dry-run", "--only", "sd15",
               "--paths", "studio", "--case-timeout-s", "0.2", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["case"]["batch"] for r in results] == [2, 1]
    first, second = results
    assert first["note"] == "timeout after 0.2 s" and first["s_per_step"] is None
    assert second["note"] == "timeout after 0.2 s" or (not second["note"] and second["s_per_step"] > 0)
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| sd15 | 64 | 2 | studio | - |" in table and table.rstrip().endswith(f"| {second['note']} |")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.json", "table.md"]
    assert left_in(temp) == []


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("gpu_train_speed", ROOT / "benchmarks" / "gpu_train_speed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_train_speed", module)  # its dataclasses look their module up by name
    spec.loader.exec_module(sys.modules["gpu_train_speed"])
    return sys.modules["gpu_train_speed"]


def test_a_case_timeout_that_falls_inside_an_import_waits_for_the_import_to_end(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout raised inside an import leaves a half-imported module behind, and every later case failed with
    "Failed to import diffusers.models.autoencoders.autoencoder_kl". The timer now lets the import finish."""
    bench = _benchmark_module()
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.4)\nREADY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    old = signal.signal(signal.SIGALRM, bench._alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # falls in the middle of the import's 0.4 s
        with pytest.raises(bench.CaseTimeout):
            import slow_to_import  # noqa: F401
            time.sleep(5)  # the case's own work: stopped here, just after the import
        assert sys.modules["slow_to_import"].READY is True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.modules.pop("slow_to_import", None)


def test_a_case_timeout_waits_for_pysides_import_hook_too() -> None:
    """With PySide loaded (a pytest worker after the window's tests), every import statement ends in PySide's hook,
    which reads the module's source: a timeout raised there left the source file open, and the collector's
    ResourceWarning failed a whole-suite run. The hook's frames count as the import's."""
    bench = _benchmark_module()

    def frame(filename: str, back: object = None) -> SimpleNamespace:
        return SimpleNamespace(f_code=SimpleNamespace(co_filename=filename), f_back=back)

    test = frame(__file__)
    tokenize = frame("/usr/lib/python3.11/tokenize.py", frame("shibokensupport/feature.py", test))
    assert bench._importing(tokenize)
    assert bench._importing(frame("slow_to_import.py", frame("<frozen importlib._bootstrap>", test)))
    assert not bench._importing(frame("/usr/lib/python3.11/tokenize.py", test))  # a source read of the case's own


def test_a_studio_case_stopped_at_its_timeout_leaves_sigterm_to_the_benchmark(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process trainer takes SIGTERM for its own stop and gave it back only when it ended by itself: after a
    case stopped at its timeout, the outer `timeout`'s SIGTERM only set a dead trainer's stop flag, and the script
    ran on until it was killed, without ending its children or printing its table."""
    import studio.core.config.files.toml_file as toml_file
    import studio.core.runs.launch as launch
    import studio.train.entry as entry
    from studio.train.runtime import StopSignal

    bench = _benchmark_module()
    import process_tree
    import studio_run

    def train(_config: object, run_dir: Path) -> int:
        StopSignal(run_dir).install()  # as Trainer.setup does
        raise bench.CaseTimeout  # the case's alarm, inside the trainer

    monkeypatch.setattr(studio_run, "resolve_paths", lambda config, _work: config)
    monkeypatch.setattr(launch, "prepare_run", lambda _config: SimpleNamespace(run_dir=tmp_path))
    monkeypatch.setattr(toml_file, "load_config", lambda _path: None)
    monkeypatch.setattr(entry, "train", train)
    with process_tree.ending_children():
        with pytest.raises(bench.CaseTimeout):
            studio_run.run_studio(None, tmp_path, 3, lambda step: step())
        with pytest.raises(SystemExit) as ended:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(500):  # the handler runs as soon as the signal arrives; this only bounds a failure
                time.sleep(0.01)
    assert ended.value.code == 128 + signal.SIGTERM


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def test_what_a_compiled_case_compiled_is_let_go_when_the_case_ends(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiler kept each compiled case's graphs after its model was gone, and on a GPU with them a "graphs"
    case's CUDA graphs and the private memory they replay in: the cases after it ran on a smaller card."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    bench = _benchmark_module()

    def measure(case: object, settings: object) -> object:
        block = _Block()
        block.compile(dynamic=False, backend="eager")
        block(torch.randn(2, 8)).sum().backward()
        assert _debug_get_cache_entry_list(_Block.forward.__code__)  # compiled for the case
        return bench.Result(case, 64, s_per_step=1.0)

    monkeypatch.setattr(bench, "_measure", measure)
    settings = bench.Settings(dry_run=True, warmup=1, steps=1, work=tmp_path)
    result = bench.run_case(bench.Case("sd15", 1, "studio compiled graphs"), settings)
    assert result.s_per_step == 1.0 and not result.note
    assert _debug_get_cache_entry_list(_Block.forward.__code__) == []


def test_cases_run_every_family_eager_at_batch_4_before_anything_compiles() -> None:
    bench = _benchmark_module()
    order = bench.cases(list(bench.FAMILIES), False, [*bench.PATHS, bench.SECOND])
    assert [c.family for c in order[:4]] == ["flux2-klein", "flux2-klein", "zimage", "zimage"]
    first_compiled = next(i for i, c in enumerate(order) if "compiled" in c.path)
    assert {(c.family, c.batch) for c in order[:first_compiled]} == {(f, 4) for f in bench.FAMILIES}
    # 5 families x 4 paths (bare, eager, compiled blocks, CUDA graphs) x 2 batches, SD1.5 at 16, the 2nd process
    assert len(order) == len(set(order)) == 4 * 5 * 2 + 4 + 1
    assert {c.path for c in order} == {"bare", "studio", "studio compiled", "studio compiled graphs",
                                       "studio compiled, 2nd process"}


@pytest.mark.parametrize(("card_gib", "batches"), [
    (79.2, {"flux2-klein": 2, "zimage": 1, "sdxl": 4, "sd3": 4, "sd15": 4}),  # an H100
    (139.8, {"flux2-klein": 4, "zimage": 2, "sdxl": 4, "sd3": 4, "sd15": 4}),  # an H200
])
def test_a_family_whose_batch_4_would_not_fit_the_card_is_measured_at_a_batch_that_does(
        card_gib: float, batches: dict[str, int]) -> None:
    """Without checkpointing, [klein] 4B at batch 4 and 1024 px needs about 85 GB and Z-Image about 161 GB: on
    the device machine's card their first cases measured only an out-of-memory error."""
    bench = _benchmark_module()
    order = bench.cases(list(bench.FAMILIES), False, [*bench.PATHS, bench.SECOND], card_gib)
    first_compiled = next(i for i, c in enumerate(order) if "compiled" in c.path)
    assert {c.family: c.batch for c in order[:first_compiled]} == batches
    assert len(order) == len(set(order))
    for family, batch in batches.items():  # batch 1 is measured once, where it is the largest that fits
        measured = [c for c in order if c.family == family and c.path == "studio compiled"]
        assert sorted(c.batch for c in measured) == sorted({batch, 1} | ({16} if family == "sd15" else set()))


def test_kernels_launches_and_host_waits_are_told_apart_in_a_profiled_step() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from step_profile import count_events

    gpu = count_events([("aten::mm", "cpu"), ("aten::add_", "cpu"), ("cudaLaunchKernel", "cpu"),
                        ("cudaLaunchKernel", "cpu"), ("ampere_bf16_gemm", "cuda"), ("vectorized_add", "cuda"),
                        ("Memcpy HtoD (Pinned -> Device)", "cuda"), ("cudaStreamSynchronize", "cpu"),
                        ("cudaMemcpyAsync", "cpu")])
    assert (gpu.ops, gpu.kernels, gpu.launches, gpu.host_waits) == (2, 2, 2, 1)
    cpu = count_events([("aten::mm", "cpu"), ("aten::mul", "cpu"), ("autograd::engine", "cpu")])
    assert (cpu.ops, cpu.kernels, cpu.launches, cpu.host_waits) == (2, None, None, None)


def test_one_addition_paths_run_only_when_named_and_after_the_rest() -> None:
    bench = _benchmark_module()
    default = bench.cases(["sdxl"], False, [*bench.PATHS, bench.SECOND])
    assert not [c for c in default if c.path.startswith("studio +") or c.path == "studio uncached"]
    named = bench.cases(["sdxl"], False, ["bare", "studio", "studio +ema", "studio uncached"])
    assert [(c.batch, c.path) for c in named] == [
        (4, "bare"), (4, "studio"), (1, "bare"), (1, "studio"),
        (4, "studio +ema"), (4, "studio uncached"), (1, "studio +ema"), (1, "studio uncached")]
    assert bench.ABLATIONS["studio +ema"] == {"training": {"ema": True}}


@pytest.mark.slow
def test_step_additions_prints_what_the_studios_step_dispatches_beyond_the_bare_step(tmp_path: Path) -> None:
    """benchmarks/step_additions.py shares the speed benchmark's tiny models and config: it runs as documented."""
    env, temp = script_env(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_additions.py"), "sd15", "--rows", "3"],
                          env=env, capture_output=True, text=True, timeout=scaled_s(300))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    head, columns, _, *rows = done.stdout.strip().splitlines()
    bare, studio = (int(word) for word in head.replace("(", " ").split() if word.isdigit())
    assert head.startswith("sd15: bare step ") and studio > bare and f"({studio - bare:+d})" in head
    assert columns == "| op | bare | studio | added |" and len(rows) == 3
    assert left_in(temp) == []
