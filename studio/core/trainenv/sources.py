"""Where the training environment's packages come from, the way this person's machine is set up.

People behind a company proxy or mirror have told pip already (pip.conf, PIP_* variables)
and their system trusts the company's certificate. pip reads its own settings; uv reads
neither pip's settings nor, by default, the system's certificates. So the studio reads
pip's settings here and hands them to uv: the index and extra indexes, folders of wheels,
the certificate bundle and the proxy. A failed step is explained with the host or file it
could not reach and what to do (`explain_failure`).
"""

from __future__ import annotations

import configparser
import os
import re
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

KEYS = ("index-url", "extra-index-url", "find-links", "cert", "proxy")


@dataclass(frozen=True)
class PipSettings:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    cert: str | None = None
    proxy: str | None = None
    files: tuple[str, ...] = field(default_factory=tuple)  # the config files read, for the log

    @property
    def has_own_sources(self) -> bool:
        """Whether the person named where packages come from (an index, a mirror, a folder of wheels)."""
        return bool(self.index_url or self.extra_index_urls or self.find_links)

    def uv_source_args(self) -> list[str]:
        """pip's extra sources as uv arguments (the index itself is placed by the caller)."""
        args: list[str] = []
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args


def pip_config_files(environ: Mapping[str, str] | None = None, platform: str = sys.platform) -> list[Path]:
    """pip's configuration files, in the order pip reads them (later ones win)."""
    env = os.environ if environ is None else environ
    if env.get("PIP_CONFIG_FILE"):
        return [Path(env["PIP_CONFIG_FILE"])]
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform.startswith("win"):
        program_data = Path(env.get("PROGRAMDATA", "C:/ProgramData"))
        appdata = Path(env.get("APPDATA", home / "AppData/Roaming"))
        return [program_data / "pip/pip.ini", home / "pip/pip.ini", appdata / "pip/pip.ini"]
    if platform == "darwin":
        return [Path("/Library/Application Support/pip/pip.conf"), home / ".pip/pip.conf",
                home / "Library/Application Support/pip/pip.conf", home / ".config/pip/pip.conf"]
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return [*(Path(d) / "pip/pip.conf" for d in xdg_dirs), Path("/etc/pip.conf"), home / ".pip/pip.conf",
            xdg_home / "pip/pip.conf"]


def read_pip_settings(environ: Mapping[str, str] | None = None, platform: str = sys.platform) -> PipSettings:
    """pip's index, extra indexes, find-links, cert and proxy: its config files, then PIP_* variables."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    read: list[str] = []
    for path in pip_config_files(env, platform):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue  # pip would stop on a broken file; the install's own pip says so in the log
        read.append(str(path))
        for section in ("global", "install"):
            if parser.has_section(section):
                found.update({key: parser.get(section, key) for key in KEYS if parser.has_option(section, key)})
    for key in KEYS:
        value = env.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            found[key] = value

    def words(key: str) -> tuple[str, ...]:
        return tuple(found.get(key, "").split())

    return PipSettings(found.get("index-url") or None, words("extra-index-url"), words("find-links"),
                       found.get("cert") or None, found.get("proxy") or None, tuple(read))


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    """Whether an index's host takes a connection (a file:// URL: whether its folder is there)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path)).exists()
    if not parsed.hostname:
        return False
    try:
        with socket.create_connection((parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)),
                                      timeout=timeout_s):
            return True
    except OSError:
        return False


def uv_environment(settings: PipSettings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What uv needs to see besides the arguments: the system's certificates, pip's bundle, pip's proxy."""
    env = os.environ if environ is None else environ
    extra = {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1"}  # the system's store (older uv: NATIVE_TLS)
    if settings.cert and not env.get("SSL_CERT_FILE"):
        extra["SSL_CERT_FILE"] = settings.cert
    if settings.proxy:
        for name in ("HTTPS_PROXY", "HTTP_PROXY"):
            if not env.get(name) and not env.get(name.lower()):
                extra[name] = settings.proxy
    return extra


_URL = re.compile(r"(?P<url>(?:https?|file)://[^\s'\"`<>)]+)")
_DNS = ("failed to lookup address", "name or service not known", "temporary failure in name resolution",
        "getaddrinfo failed", "nodename nor servname", "no such host")
_TLS = ("certificate verify failed", "invalid peer certificate", "unknownissuer", "self-signed certificate",
        "self signed certificate", "certificate is not trusted", "unable to get local issuer certificate")
_REFUSED = ("connection refused", "timed out", "operation timed out", "connect error", "network is unreachable",
            "error sending request")
_DISK_FULL = ("no space left on device", "os error 28)", "errno 28]", "not enough space on the disk")
_LONG_PATH = ("long path support", "filename or extension is too long", "os error 206)", "winerror 206]")
_MISSING = ("no solution found", "could not find a version that satisfies", "no matching distribution",
            "not found in the package registry", "was not found in")


def _host(lines: Iterable[str]) -> str | None:
    urls = [match.group("url").rstrip(".,:;") for line in lines for match in _URL.finditer(line)]
    if not urls:
        return None
    url = urls[-1]
    if url.startswith("file://"):
        return url.removeprefix("file://")
    return url.split("://", 1)[1].split("/", 1)[0]


def explain_failure(lines: list[str], sources: list[str]) -> str | None:
    """What went wrong in a failed pip/uv run and how to fix it, naming the host or file; None when unclear.

    `sources`: the indexes and folders the command was given (named when the output names none).
    """
    text = "\n".join(lines).lower()
    host = _host(lines) or _host(sources) or "the package index"
    wheels = "or install from a folder of wheels (Install from a Folder of Wheels… in this window)"
    if any(word in text for word in _DNS):
        return (f"{host} could not be found (no DNS answer): check the network connection; behind a proxy set "
                f"HTTPS_PROXY (or pip's proxy setting); or point pip's index-url at a mirror you can reach; {wheels}")
    if any(word in text for word in _TLS):
        return (f"the certificate of {host} is not trusted here: set SSL_CERT_FILE (or pip's cert setting) to "
                f"the certificate bundle of your network (a company proxy's CA), then install again; {wheels}")
    if any(word in text for word in _REFUSED):
        return (f"{host} did not answer: check the network connection and any proxy (HTTPS_PROXY); {wheels}")
    if any(word in text for word in _DISK_FULL):
        return ("the disk is full: free space on the disk of the training environment and on the one of uv's or "
                "pip's download cache (usually the system disk), then install again; it continues where it stopped")
    if any(word in text for word in _LONG_PATH):
        # pip says "No such file or directory" for these too: the path the person gave is not the one missing.
        return ("a file inside the environment has a path longer than Windows allows (260 characters): turn on "
                "Windows' long paths (an administrator's setting), or set STUDIO_TRAINING_ENV to a short folder "
                "such as C:\\studio-env, then install again")
    if "no such file or directory" in text or "does not exist" in text:
        return f"a file or folder is missing: {host}; check the path you gave, then install again"
    if any(word in text for word in _MISSING):
        return (f"a pinned package was not found in {', '.join(sources) or host}: a mirror or wheel folder must "
                "hold every package of constraints/ci.txt (the torch build too)")
    return None
