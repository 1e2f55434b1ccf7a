"""The training environment installs where people are: the index pip is set up with, the certificate
bundle their network needs (SSL_CERT_FILE or pip's cert), their proxy; a failure names the host and the fix.

The index is a PEP 503 "simple" index over HTTPS on 127.0.0.1 with a certificate of its own,
serving stand-in wheels; uv trusts it only through the configured bundle.
"""

from __future__ import annotations

import dataclasses
import html
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fixtures.wheelhouse import standin_wheelhouse

from studio.core.hardware.machine.probe import load_profile
from studio.core.trainenv.installer import install
from studio.core.trainenv.packages import CONSTRAINTS
from studio.core.trainenv.plan import InstallPlan, make_plan
from studio.core.trainenv.sources import PipSettings, explain_failure, read_pip_settings, uv_environment
from studio.core.trainenv.steps import StepFailed
from studio.core.trainenv.tools import find_uv

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Index:
    url: str
    cert: Path
    paths: list[str] = field(default_factory=list)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _certificates(folder: Path) -> tuple[Path, Path]:
    """A CA of this test (the bundle people configure) and the server's certificate signed by it."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=folder)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Studio Test CA",
            "-keyout", "ca-key.pem", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "key.pem",
            "-out", "server.csr")
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                       "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-days", "2", "-extfile", "server.ext", "-out", "cert.pem")
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture
def https_index(tmp_path: Path) -> Iterator[Index]:
    wheels = standin_wheelhouse(tmp_path / "wheels", ROOT / CONSTRAINTS)
    by_project: dict[str, list[Path]] = {}
    for wheel in wheels.glob("*.whl"):
        by_project.setdefault(_normal(wheel.name.split("-")[0]), []).append(wheel)
    cert, key = _certificates(tmp_path)
    index = Index("", tmp_path / "ca.pem")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            return None

        def do_HEAD(self) -> None:
            self.answer(head=True)

        def do_GET(self) -> None:
            self.answer(head=False)

        def answer(self, head: bool) -> None:
            index.paths.append(self.path)
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            body: bytes | None = None
            if len(parts) == 2 and parts[0] == "simple":
                files = by_project.get(_normal(parts[1]), [])
                if files:
                    links = "".join(f'<a href="/files/{html.escape(f.name)}">{html.escape(f.name)}</a>\n'
                                    for f in files)
                    body = f"<!DOCTYPE html><html><body>{links}</body></html>".encode()
            elif len(parts) == 2 and parts[0] == "files" and (wheels / parts[1]).is_file():
                body = (wheels / parts[1]).read_bytes()
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if parts[0] == "simple" else "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    index.url = f"https://127.0.0.1:{server.server_address[1]}/simple"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()


def _plan(tmp_path: Path, index: Index) -> InstallPlan:
    plan = make_plan(tmp_path / "env", "uv", None, None, load_profile("no-gpu"))
    # PyTorch's CPU index is a mirror on the same host here (the network has no other).
    return dataclasses.replace(plan, build=dataclasses.replace(plan.build, index_url=index.url))


@pytest.fixture
def uv_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if find_uv() is None:
        pytest.skip("no uv beside this Python")
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
                 "PIP_FIND_LINKS", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_DEFAULT_INDEX",
                 "UV_INDEX", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no uv.toml of this machine
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))


def test_pips_index_and_ssl_cert_file_are_what_uv_installs_from(
        https_index: Index, uv_only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pip.conf").write_text(f"[global]\nindex-url = {https_index.url}\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(https_index.cert))
    plan = _plan(tmp_path, https_index)
    assert plan.pip.index_url == https_index.url
    result = install(plan)
    assert result.facts["torch"] == "2.13.0+cpu"
    # The packages step read pip's index-url (torch's came from the build's index on the same host).
    assert "/simple/peft/" in https_index.paths and any(p.startswith("/files/peft-") for p in https_index.paths)


def test_pips_cert_setting_reaches_uv_and_without_a_bundle_the_failure_names_the_host(
        https_index: Index, uv_only: None, tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {https_index.url}\n")
    with pytest.raises(StepFailed) as failed:
        install(_plan(tmp_path, https_index))
    host = https_index.url.split("/")[2]
    assert failed.value.step == "torch"
    assert f"the certificate of {host} is not trusted here: set SSL_CERT_FILE" in str(failed.value)
    conf.write_text(f"[global]\nindex-url = {https_index.url}\ncert = {https_index.cert}\n")
    assert install(_plan(tmp_path / "again", https_index)).facts["torch"] == "2.13.0+cpu"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_without_pytorchs_index_torch_comes_from_the_persons_own_index(
        https_index: Index, uv_only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that reaches only its company's mirror: PyTorch's CPU index is not reachable from here and the
    mirror holds the CPU build. The torch step failed on the unreachable index; it now installs from the mirror."""
    (tmp_path / "pip.conf").write_text(f"[global]\nindex-url = {https_index.url}\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(https_index.cert))
    plan = make_plan(tmp_path / "env", "uv", None, None, load_profile("no-gpu"))
    unreachable = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
    plan = dataclasses.replace(plan, build=dataclasses.replace(plan.build, index_url=unreachable))
    assert plan.torch_index_unreachable()
    assert install(plan).facts["torch"] == "2.13.0+cpu"
    assert any(p.startswith("/files/torch-2.13.0+cpu") for p in https_index.paths)
    log = (tmp_path / "env" / "install.log").read_text(encoding="utf-8")
    assert f"note: 127.0.0.1 cannot be reached from this machine; torch comes from your own package sources " \
           f"({https_index.url})" in log
    assert unreachable not in log.split("note:")[1]  # the torch step's command named only the mirror


def test_pytorchs_index_is_kept_when_it_answers_or_nothing_else_is_configured(
        https_index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(tmp_path / "env", "uv", None, None, load_profile("no-gpu"))
    with_mirror = dataclasses.replace(plan, pip=PipSettings(index_url=https_index.url))
    answering = dataclasses.replace(with_mirror, build=dataclasses.replace(plan.build, index_url=https_index.url))
    assert not answering.torch_index_unreachable()
    closed = dataclasses.replace(plan.build, index_url=f"http://127.0.0.1:{_closed_port()}/whl/cpu")
    # Nothing of the person's own: the index stays, and its failure names the host and the fix.
    assert not dataclasses.replace(plan, pip=PipSettings(), build=closed).torch_index_unreachable()
    # Behind a proxy, the proxy says what is reachable.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert not dataclasses.replace(with_mirror, build=closed).torch_index_unreachable()


def test_pip_settings_are_read_from_its_files_and_variables(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\ncert = /etc/company.pem\n"
                    "[install]\nextra-index-url = https://a.example/simple https://b.example/simple\n"
                    "find-links = /srv/wheels\n")
    env = {"PIP_CONFIG_FILE": str(conf), "PIP_PROXY": "http://proxy.example:3128"}
    settings = read_pip_settings(env)
    assert settings.index_url == "https://mirror.example/simple" and settings.cert == "/etc/company.pem"
    assert settings.uv_source_args() == ["--extra-index-url", "https://a.example/simple", "--extra-index-url",
                                         "https://b.example/simple", "--find-links", "/srv/wheels"]
    assert uv_environment(settings, {}) == {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1",
                                            "SSL_CERT_FILE": "/etc/company.pem",
                                            "HTTPS_PROXY": "http://proxy.example:3128",
                                            "HTTP_PROXY": "http://proxy.example:3128"}
    assert "SSL_CERT_FILE" not in uv_environment(settings, {"SSL_CERT_FILE": "/mine.pem"})


def test_failures_name_the_host_or_file_and_the_fix() -> None:
    dns = ["error: Failed to fetch: `https://download.pytorch.org/whl/cpu/torch/`",
           "  Caused by: dns error: failed to lookup address information: Name or service not known"]
    assert explain_failure(dns, []).startswith("download.pytorch.org could not be found (no DNS answer)")  # type: ignore[union-attr]
    refused = ["  Caused by: error sending request for url (http://10.0.0.1:3128/simple/peft/)"]
    assert explain_failure(refused, []).startswith("10.0.0.1:3128 did not answer")  # type: ignore[union-attr]
    missing = ["  × No solution found when resolving dependencies:", "  ╰─▶ Because peft==0.21.2 was not found"]
    assert "not found in https://mirror.example/simple" in explain_failure(missing, ["https://mirror.example/simple"])  # type: ignore[operator]
    assert explain_failure(["Killed"], []) is None


def test_a_full_disk_and_a_windows_path_too_long_are_named_with_their_fix() -> None:
    full = ["error: Failed to install: torch-2.13.0+cu128-cp311-cp311-win_amd64.whl (torch==2.13.0+cu128)",
            "  Caused by: failed to write to file `C:\\Users\\Ana\\AppData\\Local\\uv\\cache\\archive-v0\\x`: "
            "There is not enough space on the disk. (os error 112)", "ERROR: [Errno 28] No space left on device"]
    assert explain_failure(full, []).startswith("the disk is full")  # type: ignore[union-attr]
    # pip on Windows without long paths: its own hint follows a "No such file or directory".
    long = ["ERROR: Could not install packages due to an OSError: [Errno 2] No such file or directory: 'C:\\Users\\"
            "Ana\\AppData\\Local\\sd-training-studio\\training-env\\Lib\\site-packages\\torch\\include\\x.h'",
            "HINT: This error might have occurred since this system does not have Windows Long Path support "
            "enabled. You can find information on how to enable this at https://pip.pypa.io/warnings/enable-long-paths"]
    said = explain_failure(long, ["https://pypi.org/simple"]) or ""
    assert "longer than Windows allows" in said and "STUDIO_TRAINING_ENV" in said
    assert "check the path you gave" not in said
