"""`studio-train download --json`'s lines as protocol messages: written from a DownloadProgress, read back checked."""

from __future__ import annotations

import pytest

from studio.core.models.download_messages import (
    DOWNLOAD_MESSAGES,
    DownloadDone,
    DownloadFailed,
    DownloadProgressed,
)
from studio.core.models.downloads import DownloadProgress


def test_progress_done_and_error_read_back_as_written() -> None:
    progress = DownloadProgress("org/model", "unet/x.safetensors", 1, 3, 500, 2000, 250.0, "downloading")
    read = DOWNLOAD_MESSAGES.parse(DownloadProgressed.of(progress).to_json())
    assert isinstance(read, DownloadProgressed) and read.eta_s == 6.0
    again = read.progress()
    assert (again.repo_id, again.file, again.files_done, again.done_bytes, again.total_bytes) == (
        "org/model", "unet/x.safetensors", 1, 500, 2000)
    assert DOWNLOAD_MESSAGES.parse(DownloadDone("/cache/snap", "org/model").to_json()) == DownloadDone(
        "/cache/snap", "org/model")
    assert DOWNLOAD_MESSAGES.parse('{"type": "error", "message": "gated", "gated": true}') == DownloadFailed(
        "gated", True)


@pytest.mark.parametrize(("line", "why"), [
    ('{"type": "progress", "repo_id": "a/b", "done_bytes": "lots"}', "done_bytes = 'lots' has the wrong type"),
    ('{"type": "progress", "done_bytes": 1}', "missing"),
    ('{"type": "done"}', "missing"),
    ('{"type": "error", "message": "x", "gated": "yes"}', "gated = 'yes' has the wrong type"),
    ('"done"', "not a download message object"),
])
def test_a_malformed_download_line_is_refused_with_the_field_it_names(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        DOWNLOAD_MESSAGES.parse(line)


@pytest.mark.parametrize("in_app", [False, True])
def test_a_gated_model_says_how_to_give_a_token_where_the_person_is(in_app: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # It named "Download → Token", a control neither the window nor the command line has.
    from studio.core import app_words
    from studio.core.models.downloads import _gated

    monkeypatch.setattr(app_words, "in_desktop_app", lambda: in_app)
    message = str(_gated("org/gated", None))
    assert "→" not in message
    assert message.endswith(": the download asks for it." if in_app else
                            " (`studio-train download --set-token`).")
