"""`studio-train download` against a fake hub on 127.0.0.1: only training files, progress, resume, tokens."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.fake_hub import FakeHub, tiny_sd15_repo

from studio.core.config.schema import ModelSection, TrainConfig
from studio.core.models.downloads import DownloadProgress, progress_text
from studio.core.project.preflight import check_model

pytest.importorskip("huggingface_hub", reason="downloads need the training packages")

ROOT = Path(__file__).resolve().parents[3]
SD15 = "stable-diffusion-v1-5/stable-diffusion-v1-5"
UNET = "unet/diffusion_pytorch_model.safetensors"
BIG = 12 * 1024 * 1024  # past huggingface_hub's 10 MiB write chunk, so a cut leaves a part to resume from
TRAINING_FILES = {"model_index.json", "scheduler/scheduler_config.json", "feature_extractor/preprocessor_config.json",
                  "text_encoder/config.json", "text_encoder/model.safetensors", "tokenizer/vocab.json",
                  "tokenizer/merges.txt", "unet/config.json", UNET, "vae/config.json",
                  "vae/diffusion_pytorch_model.safetensors"}


def _env(hub: FakeHub, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           # keyrings.alt's file backend stands in for the system keyring, in this test's folder.
           "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring", "STUDIO_ALLOW_FILE_KEYRING": "1",
           "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("HF_TOKEN", None)
    return env


def _download(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "studio.cli", "download", *args], env=env, capture_output=True,
                          text=True, input=stdin, timeout=120)


def _snapshot_files(env: dict[str, str], repo: str) -> dict[str, bytes]:
    snapshots = Path(env["HF_HUB_CACHE"]) / ("models--" + repo.replace("/", "--")) / "snapshots"
    (snapshot,) = snapshots.iterdir()
    return {p.relative_to(snapshot).as_posix(): p.read_bytes() for p in snapshot.rglob("*") if p.is_file()}


def test_download_fetches_the_training_files_with_progress(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    env = _env(fake_hub, tmp_path)
    out = _download(env, SD15, "--json")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1] == {"type": "done", "model": SD15, "path": lines[-1]["path"]}
    progress = [row for row in lines if row["type"] == "progress" and row["phase"] != "listing"]
    total = sum(len(repo[name]) for name in TRAINING_FILES)
    assert {row["total_bytes"] for row in progress} == {total} and progress[-1]["done_bytes"] == total
    assert [row["done_bytes"] for row in progress] == sorted(row["done_bytes"] for row in progress)
    assert progress[-1]["files_done"] == progress[-1]["files_total"] == len(TRAINING_FILES)
    files = _snapshot_files(env, SD15)
    assert files == {name: repo[name] for name in TRAINING_FILES}  # no fp16 variant, safety checker or README
    # The trainer finds it now with no network: the preflight passes.
    monkeypatch.setenv("HF_HUB_CACHE", env["HF_HUB_CACHE"])
    assert check_model(TrainConfig(model=ModelSection(family="sd15", base=SD15))) is None
    # A second run fetches nothing again.
    before = len([r for r in fake_hub.requests if r.method == "GET" and "/resolve/" in r.path])
    assert _download(env, SD15).returncode == 0
    assert len([r for r in fake_hub.requests if r.method == "GET" and "/resolve/" in r.path]) == before


def test_a_download_into_a_log_file_writes_lines_without_redraws(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.repos[SD15] = tiny_sd15_repo()
    out = _download(_env(fake_hub, tmp_path), SD15)  # stdout is a pipe, as `> download.log` or nohup makes it
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stdout and "\x1b" not in out.stdout  # no terminal codes in the log
    lines = out.stdout.splitlines()
    assert lines[0] == f"{SD15}: listing files…" and lines[-1].startswith(f"{SD15} is ready: ")
    # One line as each file starts (and as it is verified), not one per update.
    assert sorted(line.split("  ")[0] for line in lines if "(file " in line and not line.startswith("verifying")) \
        == sorted(TRAINING_FILES)


@pytest.mark.skipif(os.name != "posix", reason="Ctrl+C is a console event on Windows, not a signal to send")
def test_ctrl_c_says_how_to_go_on(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    repo[UNET] = os.urandom(BIG)
    fake_hub.stall_after[UNET] = 11 * 1024 * 1024  # held in the middle of the UNet
    # No read timeout while the hub holds the file: the download waits there, mid-file, for the Ctrl+C (with the
    # default 10 s, a busy machine's read timed out first and the download went on to finish).
    env = {**_env(fake_hub, tmp_path), "HF_HUB_DOWNLOAD_TIMEOUT": "300"}
    # Ctrl+C as a terminal sends it: a test before this one in the same worker may leave SIGINT ignored, and a
    # child inherits an ignored SIGINT (it then finished the download).
    process = subprocess.Popen([sys.executable, "-m", "studio.cli", "download", SD15], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(UNET + "  "):
            break
    blobs = tmp_path / "hf-cache" / ("models--" + SD15.replace("/", "--")) / "blobs"
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size >= 10 * 1024 * 1024 for p in blobs.glob("*.part")):  # held mid-file now
        assert time.monotonic() < deadline and process.poll() is None, "the download never reached the held bytes"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.endswith("stopped: the files finished are kept and a cut file resumes; run the same command again\n")
    assert "Traceback" not in err


def test_the_terminal_shows_bytes_rate_and_time_left() -> None:
    progress = DownloadProgress(SD15, file=UNET, files_done=2, files_total=10, total_bytes=4_300_000_000)
    progress.received(1_000_000, 100.0)
    progress.received(45_000_000, 101.0)
    assert progress_text(progress) == f"{UNET}  46.0 MB / 4.3 GB  45.0 MB/s  ETA 1:34  (file 3 of 10)"


def test_a_connection_dropped_mid_file_resumes_from_the_bytes_received(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    repo[UNET] = os.urandom(BIG)
    fake_hub.cut_after[UNET] = 11 * 1024 * 1024
    out = _download(_env(fake_hub, tmp_path), SD15)
    assert out.returncode == 0, out.stderr
    first, second = fake_hub.gets(UNET)
    assert first.range is None and second.range == f"bytes={10 * 1024 * 1024}-"
    assert _snapshot_files(_env(fake_hub, tmp_path), SD15)[UNET] == repo[UNET]


@pytest.mark.slow
def test_a_download_ended_part_way_resumes_when_run_again(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    repo[UNET] = os.urandom(BIG)
    fake_hub.stall_after[UNET] = 11 * 1024 * 1024
    env = _env(fake_hub, tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "studio.cli", "download", SD15], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blobs = Path(env["HF_HUB_CACHE"]) / ("models--" + SD15.replace("/", "--")) / "blobs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size >= 10 * 1024 * 1024
                                                  for p in blobs.glob("*.part")):
        time.sleep(0.05)
    process.kill()  # the window closed, the machine slept, Ctrl+C...
    process.wait(10)
    out = _download(env, SD15)
    assert out.returncode == 0, out.stderr
    assert [r.range for r in fake_hub.gets(UNET)] == [None, f"bytes={10 * 1024 * 1024}-"]
    assert _snapshot_files(env, SD15)[UNET] == repo[UNET]


def test_a_damaged_file_is_removed_and_named(fake_hub: FakeHub, tmp_path: Path) -> None:
    from studio.core.models.downloads import RemoteFile, verify

    path = tmp_path / "w.safetensors"
    path.write_bytes(b"x" * 2000)
    assert verify(path, RemoteFile("w.safetensors", 2000, "0" * 64)) == (
        f"w.safetensors does not match the hash the hub announced (sha256 {'0' * 64}, the file has "
        f"{hashlib.sha256(b'x' * 2000).hexdigest()})")
    assert verify(path, RemoteFile("w.safetensors", 2000, None, "0" * 40)).startswith(
        "w.safetensors does not match the hash the hub announced (git-sha1")
    assert verify(path, RemoteFile("w.safetensors", 10, None)) == "w.safetensors has 2000 bytes, the hub lists 10"


def test_without_network_the_error_says_so_and_names_the_missing_files(tmp_path: Path) -> None:
    hub = FakeHub(repos={}, url="http://127.0.0.1:9")  # nothing listens on the discard port
    out = _download(_env(hub, tmp_path), SD15)
    assert out.returncode == 1
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: Cannot reach the Hugging Face hub for {SD15} (ConnectError")
    assert "still missing: model_index.json, scheduler/scheduler_config.json" in line
    assert line.endswith("Check the network and run the download again: finished files are kept and a cut file "
                         "resumes.")


@pytest.mark.slow
def test_a_gated_model_asks_for_a_token_that_is_never_written_to_a_file(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    pytest.importorskip("keyrings.alt", reason="the tests keep tokens with keyrings.alt's file backend")
    secret = "hf_SeCrEt0123456789"
    gated = "stabilityai/stable-diffusion-3-medium-diffusers"
    fake_hub.repos[gated] = {"model_index.json": b"{}", "transformer/config.json": b"{}"}
    fake_hub.gated[gated] = secret
    env = _env(fake_hub, tmp_path)
    refused = _download(env, gated)
    assert refused.returncode == 1 and f"error: {gated} is gated (it needs a Hugging Face token)" in refused.stderr
    stored = _download(env, "--set-token", stdin=secret + "\n")
    # Named as what it is: the tests allow a file backend (STUDIO_ALLOW_FILE_KEYRING), a person is never given one.
    assert stored.returncode == 0
    assert stored.stdout == "token kept in a file, not the system keyring (keyrings.alt.file.PlaintextKeyring)\n"
    out = _download(env, gated)
    assert out.returncode == 0, out.stderr
    assert {r.authorization for r in fake_hub.requests if "/resolve/" in r.path} == {f"Bearer {secret}"}
    # Every file the studio and the download wrote: caches, settings, the cache of models.
    keyring_folder = tmp_path / "data" / "python_keyring"  # the system keyring's stand-in
    assert (keyring_folder / "keyring_pass.cfg").is_file()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and keyring_folder not in p.parents]
    written += [p for name in ("STUDIO_CONFIG_DIR", "STUDIO_CACHE_DIR", "STUDIO_DATA_DIR")
                for p in Path(os.environ[name]).rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret.encode() in p.read_bytes()]
    assert secret not in refused.stdout + refused.stderr + out.stdout + out.stderr + stored.stdout
    assert _download(env, "--forget-token").stdout == "token removed\n"


def test_a_captioner_download_fetches_the_files_its_kind_loads(fake_hub: FakeHub, tmp_path: Path) -> None:
    """`download --captioner blip-base`: the BLIP repository's configs, tokenizer and safetensors weights,
    not its PyTorch, TensorFlow or README files; an unknown name says which names there are."""
    repo = "Salesforce/blip-image-captioning-base"
    wanted = {"config.json": b"{}", "preprocessor_config.json": b"{}", "tokenizer_config.json": b"{}",
              "vocab.txt": b"[PAD]\n", "model.safetensors": bytes(range(256)) * 8}
    fake_hub.repos[repo] = {**wanted, "pytorch_model.bin": bytes(3000), "tf_model.h5": bytes(3000),
                            "README.md": b"# blip"}
    env = _env(fake_hub, tmp_path)
    out = _download(env, "--captioner", "blip-base", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["model"] == repo
    assert _snapshot_files(env, repo) == wanted
    wrong = _download(env, "--captioner", "blip-huge")
    assert wrong.returncode == 2 and "no known captioning model 'blip-huge'" in wrong.stderr
    assert "wd14-vit-v3" in wrong.stderr


def test_a_token_the_hub_no_longer_takes_is_named_not_the_network(fake_hub: FakeHub, tmp_path: Path) -> None:
    """An expired or revoked token is refused by the hub for every model, public ones too: the error says to
    replace the token (the window then asks for one), not to check the network."""
    fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    fake_hub.refused_tokens.add("hf_Expired0123")
    env = {**_env(fake_hub, tmp_path), "HF_TOKEN": "hf_Expired0123"}
    out = _download(env, SD15, "--json")
    assert out.returncode == 1
    failed = json.loads(out.stdout.splitlines()[-1])
    assert failed["type"] == "error" and failed["gated"] is True  # the window asks for a new token
    assert failed["message"] == (
        f"The Hugging Face hub refused the token in HF_TOKEN for {SD15} (401: invalid credentials): it has expired "
        "or was revoked. Make a new one at https://huggingface.co/settings/tokens and put it in HF_TOKEN, or unset "
        "HF_TOKEN to download public models without a token.")
    assert "hf_Expired0123" not in out.stdout + out.stderr


def test_a_full_disk_is_named_with_the_space_needed_and_the_part_removed(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills part way through the UNet: the error says the disk is full (not the network), names the
    cache folder and what the rest of the download needs, and the part written is removed to free the disk."""
    import errno

    from huggingface_hub import constants, file_download

    from studio.core.models.downloads import DownloadError, download_model

    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    monkeypatch.setenv("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "0"))  # the download turns it off
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setattr(constants, "ENDPOINT", fake_hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake_hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    real_get = file_download.http_get

    def filling_get(url: str, temp_file: object, **kwargs: object) -> None:
        if url.endswith(UNET):
            real_write = temp_file.write  # type: ignore[attr-defined]

            class Full:
                def write(self, data: bytes) -> int:
                    real_write(data[:1000])
                    raise OSError(errno.ENOSPC, "No space left on device")

                def __getattr__(self, name: str) -> object:
                    return getattr(temp_file, name)

            temp_file = Full()
        real_get(url, temp_file, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(file_download, "http_get", filling_get)
    cache = tmp_path / "hf-cache"
    with pytest.raises(DownloadError) as raised:
        download_model(SD15, cache_dir=cache)
    storage = cache / ("models--" + SD15.replace("/", "--"))
    message = str(raised.value)
    assert message.startswith(f"{SD15}: the disk holding the model cache {storage} is full (")
    left = sum(len(repo[name]) for name in TRAINING_FILES if name >= UNET)  # the files are fetched by name
    assert f"the rest of the download needs {left / 1000:.1f} KB" in message
    assert "check the network" not in message.lower()
    assert not list((storage / "blobs").glob("*.part"))  # the part is gone: the disk is not left full


def test_on_windows_a_downloaded_file_the_antivirus_scans_is_put_in_place_when_it_lets_go(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The antivirus opens each file just downloaded for a moment: moving the finished part into place failed with
    'being used by another process', and a download of gigabytes ended in an error at its last step."""
    from huggingface_hub import constants

    from studio.core import files
    from studio.core.models.downloads import download_model
    from tests.core.test_replace_on_windows import _open_elsewhere_for, _Windows

    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    monkeypatch.setenv("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "0"))  # the download turns it off
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setattr(constants, "ENDPOINT", fake_hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake_hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(files, "sys", _Windows())
    refused = _open_elsewhere_for(2, monkeypatch)
    snapshot = download_model(SD15, cache_dir=tmp_path / "hf-cache")
    assert len(refused) == 2  # the first file waited twice for the scan to end
    assert (snapshot / UNET).read_bytes() == repo[UNET]


@pytest.mark.slow
def test_two_downloads_of_one_model_at_once_both_end_with_its_right_bytes(fake_hub: FakeHub, tmp_path: Path) -> None:
    """Two windows download the same model: the second waits for the file the first is writing instead of
    appending to the same part file (which left a file of both, or grew the first's checked file after it)."""
    repo = fake_hub.repos[SD15] = tiny_sd15_repo()
    repo[UNET] = os.urandom(BIG)
    fake_hub.stall_after[UNET] = 11 * 1024 * 1024
    env = _env(fake_hub, tmp_path)
    command = [sys.executable, "-m", "studio.cli", "download", SD15]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    blobs = Path(env["HF_HUB_CACHE"]) / ("models--" + SD15.replace("/", "--")) / "blobs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size >= 10 * 1024 * 1024
                                                  for p in blobs.glob("*.part")):
        time.sleep(0.05)
    second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while time.monotonic() < deadline and len(fake_hub.heads(UNET)) < 2:  # the second has come to the same file
        time.sleep(0.05)
    fake_hub.stopping.set()  # the first one's stalled line drops: it resumes and finishes the file
    outs = [process.communicate(timeout=120) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert _snapshot_files(env, SD15)[UNET] == repo[UNET]
    assert not list(blobs.glob("*.part"))
