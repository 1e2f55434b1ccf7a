"""`studio-train download ID`: fetch a base model's training files from the Hugging Face hub;
`--captioner NAME`: a captioning model the studio knows (the files it loads, into the same cache).

Shows bytes, rate and time left; `--json` prints the same as JSON lines (the GUI runs this
command and reads them). A download cut short resumes when run again.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "download", help="download a base model's training files from the Hugging Face hub",
        description="Fetch only the files training needs (configs, tokenizers, full-precision weights) into the "
        "Hugging Face cache, where training finds them with no network. Run it again to resume. A gated "
        "model needs a token: store one with --set-token (it is kept in the system keyring).",
    )
    parser.add_argument("model", nargs="?", metavar="ID", help="hub id, e.g. stable-diffusion-v1-5/stable-diffusion-v1-5")
    parser.add_argument("--captioner", metavar="NAME",
                        help="download a captioning model the studio knows instead of a base model "
                        "(blip-base, blip-large, florence2-base, florence2-large, wd14-vit-v3, …)")
    parser.add_argument("--with-t5", action="store_true", help="SD3: also fetch the T5 text encoder (model.use_t5)")
    parser.add_argument("--revision", help="a branch, tag or commit (default: main)")
    parser.add_argument("--json", action="store_true", help="print progress as JSON lines")
    parser.add_argument("--set-token", action="store_true", help="read a Hugging Face token from stdin and keep it")
    parser.add_argument("--forget-token", action="store_true", help="remove the kept token")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.models.hub_token import (
        TokenStoreError,
        forget_token,
        read_token,
        store_token,
        where_kept,
    )

    try:
        if args.set_token:
            prompt = "Hugging Face token (input hidden): "
            token = getpass.getpass(prompt) if sys.stdin.isatty() else sys.stdin.readline()
            store_token(token)
            print(f"token kept in {where_kept()}")
        if args.forget_token:
            print("token removed" if forget_token() else "no token was kept")
    except TokenStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.captioner:
        return _download_captioner(args, read_token())
    if not args.model:
        if args.set_token or args.forget_token:
            return EXIT_OK
        print("error: name the model to download, e.g. studio-train download "
              "stable-diffusion-v1-5/stable-diffusion-v1-5 (see studio-train models --known)", file=sys.stderr)
        return EXIT_INVALID
    return _download(args, read_token())


def _download_captioner(args: argparse.Namespace, token: str | None) -> int:
    from studio.core.dataset.captions.captioner_models import KNOWN_CAPTIONERS, known_captioner

    known = known_captioner(args.captioner)
    if known is None:
        names = ", ".join(m.name for m in KNOWN_CAPTIONERS)
        print(f"error: no known captioning model {args.captioner!r}: choose one of {names}", file=sys.stderr)
        return EXIT_INVALID
    args.model = known.repo
    return _download(args, token, keep=known.download_patterns)


def _download(args: argparse.Namespace, token: str | None, keep: tuple[str, ...] | None = None) -> int:
    from studio.core.models.download_messages import DownloadDone, DownloadFailed, DownloadProgressed
    from studio.core.models.downloads import DownloadError, DownloadProgress, download_model, progress_text
    from studio.core.protocol.jsonlines import write_message

    redraw = sys.stdout.isatty()  # a terminal: one line redrawn; a log file or a pipe: a line per file and phase
    said: set[tuple[str, str]] = set()
    after_bar = "\n" if redraw else ""

    def report(progress: DownloadProgress) -> None:
        if args.json:
            write_message(DownloadProgressed.of(progress))
        elif redraw:
            sys.stdout.write("\r" + progress_text(progress) + "\x1b[K")
            sys.stdout.flush()
        elif progress.phase != "done" and (step := (progress.phase, progress.file)) not in said:
            said.add(step)
            print(progress_text(progress), flush=True)

    try:
        snapshot = download_model(args.model, report, token=token, with_t5=args.with_t5, revision=args.revision,
                                  keep=keep)
    except DownloadError as exc:
        if args.json:
            write_message(DownloadFailed(str(exc), exc.gated))
        else:
            print(f"{after_bar}error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl+C: the prompt on a line of its own, and how to go on
        print(f"{after_bar}stopped: the files finished are kept and a cut file resumes; run the same command again",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        write_message(DownloadDone(str(snapshot), args.model))
    else:
        print(f"{after_bar}{args.model} is ready: {snapshot}")
    return EXIT_OK
