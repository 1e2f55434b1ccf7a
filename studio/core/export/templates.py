"""The bundle's templated files: placeholders `@@NAME@@` filled from the export (README.md here)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from studio import __version__
from studio.core.config.schema import TrainConfig
from studio.core.export.check import human_size
from studio.core.resources import resource_path

_PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")


def render(template: str, values: dict[str, str]) -> str:
    """Fill every `@@NAME@@`; a name without a value is an error (a template and its code disagree)."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise KeyError(f"bundle template placeholders without a value: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _dataset_text(info: dict[str, Any], folder: str) -> tuple[str, str]:
    data = info["dataset"]
    size = f"{data['files']} files, {human_size(data['bytes'])}"
    if data["included"]:
        return (f"The dataset is inside (`dataset/`, {size}).", f"the images and captions ({size}) and `manifest.json`")
    root = data["root"]
    remote = root if root.startswith("/") else f"{folder}/{root}"
    # The path the person gave (--remote-dataset) goes into a command line: one shell word, whatever it holds.
    return (
        f"**The dataset is not inside**: copy it ({size}) to `{remote}/` on the remote machine so that the "
        f"files listed in `dataset/manifest.json` are there, one folder per concept, e.g.\n\n"
        f"    rsync -a path/to/<concept folder>/ user@remote:{shlex.quote(remote)}/<concept folder>/\n\n"
        "`./check.sh` compares every file's size and SHA-256 with the manifest.",
        f"`manifest.json` only (the images, {size}, are copied separately)",
    )


def _model_text(info: dict[str, Any]) -> str:
    model = info["base_model"]
    if model["kind"] == "hub":
        return (f"The base model `{model['value']}` is downloaded from the hub at the start (about "
                "a few GB into the hub cache); for a gated model set `HF_TOKEN=...` in the environment first.")
    if model["kind"] == "bundle":
        return f"The base model is inside (`{model['value']}`)."
    return (f"**The base model is not inside**: it must be at `{model['value']}` on the remote machine "
            "(the path you named at export); `./check.sh` verifies it.")


def _nodes_text(info: dict[str, Any]) -> str:
    if info["nodes"] == 1:
        return ("\nFor several nodes later: copy the bundle to each, then run on every node "
                "`NUM_MACHINES=N MAIN_PROCESS_IP=<address of node 0> MACHINE_RANK=<0..N-1> ./launch.sh --check`.\n")
    ranks = "\n".join(
        f"    MAIN_PROCESS_IP=<address of node 0> MACHINE_RANK={r} ./launch.sh --check   # node {r}"
        for r in range(info["nodes"])
    )
    return (f"\n### Several nodes ({info['nodes']})\n\nCopy the bundle (and dataset) to every node, then start "
            f"each one; node 0 must be reachable from the others on port {info.get('port', 29500)}:\n\n{ranks}\n\n"
            "Node 0 writes the run's files; the others only train. Without InfiniBand between the nodes, "
            "expect a lower speed-up than on one node.\n")


def _run_text(config: TrainConfig, info: dict[str, Any]) -> str:
    t = config.training
    steps = info["steps"]
    processes = info["num_processes"]
    lines = [
        f"- {processes} training process(es): {info['nodes']} node(s) x {info['gpus_per_node']} GPU(s); "
        "each process trains on its own share of the images (no image twice per epoch across processes).",
        f"- Effective batch: {t.batch_size} per GPU x {t.gradient_accumulation} accumulation x {processes} "
        f"processes = **{info['effective_batch']}** images per optimizer step.",
        f"- Learning rate: {t.learning_rate:g}, not scaled with the process count (with a much larger effective "
        "batch, a higher rate may train faster; the studio leaves that choice to you).",
    ]
    if steps["bundle"] is not None:
        if steps["original"] != steps["bundle"]:
            lines.append(f"- Steps: max_steps {steps['original']} became **{steps['bundle']}** so that the run "
                         "sees as many images as the local config did (sample and checkpoint intervals scaled too).")
        else:
            lines.append(f"- Steps: max_steps {steps['bundle']}.")
    else:
        lines.append(f"- Length: {steps['epochs'] or 10} epoch(s); steps per epoch shrink with more processes.")
    if info["vram_estimate_mb"]:
        lines.append(f"- Estimated GPU memory: about {info['vram_estimate_mb'] / 1024:.1f} GB per GPU.")
    lines.append(f"- Mixed precision: {t.mixed_precision}; family {config.model.family}, method {config.method.kind}, "
                 f"resolution {config.dataset.resolution}.")
    return "\n".join(lines)


def _cloud_text(info: dict[str, Any]) -> str:
    cloud = info["cloud"]
    wanted = cloud["accelerators"]
    gpus = wanted if isinstance(wanted, str) else " or ".join(f"{name}:{count}" for name, count in wanted.items())
    nodes = f"{info['nodes']} nodes of " if info["nodes"] > 1 else ""
    # A hub base downloads on the cluster: SkyPilot hands it this shell's HF_TOKEN as a secret, which no file of
    # the bundle holds. A gated base needs it; SkyPilot refuses `--secret HF_TOKEN` when the shell has none.
    hub, gated = info["base_model"]["kind"] == "hub", bool(info["base_model"].get("gated"))
    secret = ("`--secret HF_TOKEN` gives the cluster the Hugging Face token of this shell's `HF_TOKEN` ("
              + ("set it first: the base model is gated" if gated else "add it for a gated or private base model")
              + "); it is not written in this folder, and SkyPilot shows it redacted.")
    lines = [
        "With [SkyPilot](https://docs.skypilot.co) installed (`pip install skypilot[runpod]`, or the clouds you use) "
        "and a cloud enabled (`sky check`), from this folder:",
        "",
        f"    sky launch -c {cloud['cluster']} sky.yaml" + (" --secret HF_TOKEN" if gated else ""),
        "",
        *([secret, ""] if hub else []),
        f"SkyPilot finds the cheapest offer of {nodes}`{gpus}` among your clouds, copies this folder there, installs "
        "`requirements.txt`, and runs `./launch.sh --check` on every node with the node's rank and the main "
        "node's address.",
    ]
    per_hour = cloud["per_hour"]
    if per_hour:
        lines += ["", f"By the studio's GPU catalogue, {per_hour['gpu']} x {info['gpus_per_node'] * info['nodes']} "
                  f"costs about {per_hour['min']:.2f}-{per_hour['max']:.2f} {per_hour['currency']} per hour "
                  "(`sky launch` shows the live price before it starts)."]
    lines += [
        "",
        f"- Follow it: `sky logs {cloud['cluster']}`; stop early: `ssh {cloud['cluster']} 'touch sky_workdir/runs/*/STOP'` "
        "(the trainer saves a checkpoint), then `sky down`.",
        f"- The cluster stops itself {cloud['task']['resources']['autostop']['idle_minutes']} minutes after the run "
        f"(autostop, then down); `sky down {cloud['cluster']}` ends it at once.",
    ]
    if cloud["bucket"]:
        lines.append(f"- The run folders are written to `{cloud['bucket']}/runs/<SkyPilot task id>/` (mounted at "
                     "/studio-outputs), one folder per launch.")
    else:
        lines.append(f"- Bring the results back: `rsync -a {cloud['cluster']}:sky_workdir/runs/ ./runs-remote/` "
                     "before the cluster goes down.")
    if cloud["spot"]:
        lines.append("- Spot machines: launch as a managed job, `sky jobs launch sky.yaml`, so a preempted run is "
                     "started again; it resumes from its newest checkpoint"
                     + (" on the bucket." if cloud["bucket"] else " only with a bucket (otherwise from step 0)."))
    return "\n".join(lines)


def readme_text(config: TrainConfig, info: dict[str, Any], folder: str) -> str:
    dataset_text, dataset_row = _dataset_text(info, folder)
    gpu_check = f"{info['gpus_per_node']} GPU(s) on this node"
    if info["vram_estimate_mb"]:
        gpu_check += f" with about {info['vram_estimate_mb'] / 1024:.1f} GB each"
    gpu_line = f"{info['nodes']} node(s) x {info['gpus_per_node']} GPU(s)"
    if info.get("gpu_type"):
        gpu_line += f" ({info['gpu_type']})"
    values = {
        "TITLE": f"{config.output.name} ({config.model.family} {config.method.kind})",
        # FOLDER stands in command lines only (rsync, cd): one shell word.
        "VERSION": __version__, "DATE": info["exported"][:10], "GPU_LINE": gpu_line, "FOLDER": shlex.quote(folder),
        "DATASET_TEXT": dataset_text, "DATASET_ROW": dataset_row, "MODEL_TEXT": _model_text(info),
        "PYTHON": info["python"], "GPU_CHECK": gpu_check,
        "NODES_TEXT": _nodes_text({**info, "port": config.launch.main_process_port}),
        "RUN_TEXT": _run_text(config, info),
        "CLOUD_TEXT": _cloud_text(info),
    }
    return render(resource_path("bundle", "README.md.in").read_text(encoding="utf-8"), values)
