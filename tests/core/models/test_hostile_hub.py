"""A hub endpoint that lies: redirects to another host, ETags and file names that climb out of the cache.

The token goes only to the endpoint (and the real hub's CDN), never across a redirect to another
host; nothing lands outside the cache's own folders.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.fake_hub import COMMIT, FakeHub, tiny_sd15_repo

from studio.core.models.hub_token import token_may_go_to
from tests.core.models.test_downloads import SD15, _download, _env

pytest.importorskip("huggingface_hub", reason="downloads need the training packages")

SECRET = "hf_NeverElsewhere0123456789"


@pytest.mark.parametrize(("url", "endpoint", "allowed"), [
    ("https://huggingface.co/x/resolve/main/a", "https://huggingface.co", True),
    ("https://cdn-lfs-us-1.huggingface.co/repos/a", "https://huggingface.co", True),
    ("https://cas-bridge.xethub.hf.co/xet-bridge/a", "https://huggingface.co", True),
    ("http://cdn-lfs.huggingface.co/a", "https://huggingface.co", False),  # never in clear text
    ("https://huggingface.co.evil.example/a", "https://huggingface.co", False),
    ("https://evil-huggingface.co/a", "https://huggingface.co", False),
    ("https://cdn-lfs.huggingface.co/a", "https://hub.mirror.example", False),  # a mirror's token stays there
    ("http://127.0.0.1:9001/a", "http://127.0.0.1:9000", False),  # another port is another server
    ("http://127.0.0.1:9000/x/resolve/main/a", "http://127.0.0.1:9000", True),
    ("https://127.0.0.1:9000/a", "http://127.0.0.1:9000", False),
])
def test_the_token_goes_only_to_the_endpoint_and_the_hubs_cdn(url: str, endpoint: str, allowed: bool) -> None:
    assert token_may_go_to(url, endpoint) is allowed


def _everything_written(tmp_path: Path) -> list[Path]:
    found = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    found += [p for name in ("STUDIO_CONFIG_DIR", "STUDIO_CACHE_DIR", "STUDIO_DATA_DIR")
              for p in Path(os.environ[name]).rglob("*") if p.is_file()]
    return found


@pytest.mark.slow
def test_a_redirect_to_another_host_gets_no_token(fake_hub: FakeHub, other_host: FakeHub, tmp_path: Path) -> None:
    fake_hub.repos[SD15] = other_host.repos[SD15] = tiny_sd15_repo(weights=3000)
    fake_hub.redirect_to = other_host.url
    env = {**_env(fake_hub, tmp_path), "HF_TOKEN": SECRET}
    out = _download(env, SD15)
    assert out.returncode == 0, out.stderr
    assert other_host.gets("unet/diffusion_pytorch_model.safetensors")  # the file came from there
    assert {r.authorization for r in other_host.requests} == {None}
    assert {r.authorization for r in fake_hub.requests if "/resolve/" in r.path} == {f"Bearer {SECRET}"}
    assert SECRET not in out.stdout + out.stderr
    assert not [p for p in _everything_written(tmp_path) if SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("etag", ["../../../../../X", "/tmp/studio-hostile-etag", "a/b"])
def test_an_etag_that_names_a_path_is_refused_and_nothing_lands_outside(fake_hub: FakeHub, tmp_path: Path,
                                                                        etag: str) -> None:
    fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    fake_hub.etags["model_index.json"] = etag
    env = _env(fake_hub, tmp_path)
    out = _download(env, SD15)
    assert out.returncode == 1
    assert f"refused {etag!r}" in out.stderr and "Traceback" not in out.stderr
    cache = Path(env["HF_HUB_CACHE"])
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and cache not in p.parents]
    assert [p for p in outside if "X" in p.name or "etag" in p.name] == []
    assert not Path("/tmp/studio-hostile-etag").exists() and not Path("/tmp/studio-hostile-etag.part").exists()


def test_a_file_list_naming_paths_outside_is_refused_before_a_request(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = "someone/model"
    fake_hub.repos[repo] = {"model_index.json": b"{}", "../../../evil.json": b"{}"}
    out = _download(_env(fake_hub, tmp_path), repo)
    assert out.returncode == 1 and "refused '../../../evil.json'" in out.stderr
    assert not [r for r in fake_hub.requests if "/resolve/" in r.path]
    assert not [p for p in tmp_path.rglob("evil.json")]


def test_a_file_keyring_is_never_chosen_silently_for_the_token(fake_hub: FakeHub, tmp_path: Path) -> None:
    pytest.importorskip("keyrings.alt", reason="the file backend under test comes with keyrings.alt")
    env = _env(fake_hub, tmp_path)
    env.pop("STUDIO_ALLOW_FILE_KEYRING")  # what a person's environment with keyrings.alt installed looks like
    stored = _download(env, "--set-token", stdin=SECRET + "\n")
    assert stored.returncode == 2 and "token kept" not in stored.stdout
    assert ("No system keyring is available: the keyring package would keep the token in a file, not the system "
            "keyring (keyrings.alt.file.PlaintextKeyring). Nothing was kept") in stored.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not (tmp_path / "data" / "python_keyring").exists()


def _outside_cache(tmp_path: Path, cache: Path) -> list[Path]:
    """Every file or link the download left in the test's folder outside the cache (the keyring's folder aside)."""
    return [p for p in tmp_path.rglob("*") if (p.is_file() or p.is_symlink()) and cache not in p.parents
            and tmp_path / "data" not in p.parents]


def test_a_second_answer_pointing_outside_the_cache_writes_nothing_there(fake_hub: FakeHub, tmp_path: Path) -> None:
    # huggingface_hub asks again when it links a snapshot; this hub's second answer climbs out of blobs/.
    fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    fake_hub.second_etag = "../../../escaped"
    env = _env(fake_hub, tmp_path)
    cache = Path(env["HF_HUB_CACHE"])
    out = _download(env, SD15)
    assert _outside_cache(tmp_path, cache) == []
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "escaped.incomplete").exists()
    assert out.returncode == 0, out.stderr
    snapshot = cache / ("models--" + SD15.replace("/", "--"))
    for link in (snapshot / "snapshots").rglob("*"):
        assert cache in Path(os.path.realpath(link)).parents, link  # every file of the snapshot lies in the cache


def test_a_small_file_whose_bytes_do_not_match_its_hash_is_refused_and_named(fake_hub: FakeHub,
                                                                            tmp_path: Path) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    repo["unet/config.json"] = b'{"sample_size": 64}'
    fake_hub.tampered["unet/config.json"] = b'{"sample_size": 65}'  # as long, another hash
    env = _env(fake_hub, tmp_path)
    cache = Path(env["HF_HUB_CACHE"])
    out = _download(env, SD15)
    assert out.returncode == 1
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert "unet/config.json" in line and "does not match the hash the hub announced" in line
    assert "HF_ENDPOINT" in line and "Traceback" not in out.stderr
    assert _outside_cache(tmp_path, cache) == []
    # Nothing with the wrong bytes is left where the trainer would load it.
    assert not [p for p in cache.rglob("*") if p.is_file() and p.read_bytes() == b'{"sample_size": 65}']


def test_weights_whose_bytes_do_not_match_the_announced_sha256_are_refused(fake_hub: FakeHub, tmp_path: Path) -> None:
    repo = fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    name = "unet/diffusion_pytorch_model.safetensors"  # kept in LFS: announced by its sha256
    fake_hub.tampered[name] = bytes(len(repo[name]))
    env = _env(fake_hub, tmp_path)
    out = _download(env, SD15)
    assert out.returncode == 1
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert name in line and "sha256" in line
    assert not [p for p in Path(env["HF_HUB_CACHE"]).rglob("*") if p.is_file() and p.read_bytes() == bytes(len(repo[name]))]


def test_a_snapshot_link_an_earlier_download_left_outside_the_cache_is_refused(fake_hub: FakeHub,
                                                                               tmp_path: Path) -> None:
    fake_hub.repos[SD15] = tiny_sd15_repo(weights=3000)
    env = _env(fake_hub, tmp_path)
    snapshot = Path(env["HF_HUB_CACHE"]) / ("models--" + SD15.replace("/", "--")) / "snapshots" / COMMIT
    (snapshot / "unet").mkdir(parents=True)
    planted = tmp_path / "planted.safetensors"  # what a hub's second answer once wrote beside the cache
    planted.write_bytes(b"not the model")
    (snapshot / "unet" / "extra.safetensors").symlink_to(planted)
    out = _download(env, SD15)
    assert out.returncode == 1
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert f"unet/extra.safetensors links outside the cache folder {snapshot.parents[1]}, to {planted}" in line
    assert f"delete the cache folder {snapshot.parents[1]} and run the download again" in line
    assert "HF_ENDPOINT" in line
