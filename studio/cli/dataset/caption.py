"""`studio-train caption DIR --model NAME`: caption a folder's images with a local captioning or tagging model.

The model runs here, never in the studio's window; the Dataset page starts this command
with `--json --dry-run` and reviews what it prints before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from studio.core.dataset.captions.auto_caption import (
    DEFAULT_CHARACTER_THRESHOLD,
    DEFAULT_GENERAL_THRESHOLD,
    EVENT_CAPTION,
    EVENT_PROGRESS,
    EVENT_STARTED,
    EVENT_WARNING,
    MODE_HELP,
    MODES,
    CaptionRules,
    parse_blacklist,
)
from studio.core.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from studio.caption.dataset import CaptionDataset
    from studio.caption.job import JobPlan, JobResult
    from studio.core.dataset.captions.captioner_models import CaptionerSource


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "caption", help="caption images with a local captioning or tagging model (BLIP, Florence-2, WD14)",
        description="Caption the images of DIR (an image folder, or a project folder with studio.toml) with a "
        "local model. Captions are written atomically; a caption a person wrote is only overwritten with "
        "--mode replace. Stop with Ctrl+C: the same command resumes where it stopped.")
    parser.add_argument("dir", metavar="DIR", help="image folder or project folder")
    parser.add_argument("--model", required=True, metavar="NAME_OR_PATH",
                        help="a model folder, or a known name (blip-base, florence2-base, wd14-vit-v3, ...)")
    parser.add_argument("--mode", choices=MODES, default="fill-missing",
                        help="; ".join(f"{m}: {h}" for m, h in MODE_HELP.items()) + " (default: fill-missing)")
    parser.add_argument("--prefix", default="", metavar="TEXT",
                        help="trigger word (or comma-separated tags) kept first in every caption written")
    parser.add_argument("--threshold", type=float, default=DEFAULT_GENERAL_THRESHOLD, metavar="X",
                        help=f"taggers: lowest score of a general tag (default {DEFAULT_GENERAL_THRESHOLD})")
    parser.add_argument("--character-threshold", type=float, default=DEFAULT_CHARACTER_THRESHOLD, metavar="X",
                        help=f"taggers: lowest score of a character tag (default {DEFAULT_CHARACTER_THRESHOLD})")
    parser.add_argument("--blacklist", default="", metavar="TAGS", help="comma-separated tags never written")
    parser.add_argument("--images-from", metavar="FILE", help="caption only the images listed in FILE, one a line")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written and write nothing")
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    parser.add_argument("--precision", choices=("auto", "fp32", "fp16", "bf16"), default="auto",
                        help="weights' precision: auto is bf16/fp16 on a GPU, fp32 on the CPU")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N", help="images per batch")
    parser.add_argument("--max-tokens", type=int, default=60, metavar="N",
                        help="sentence captioners: the longest caption written, in the model's tokens (default 60)")
    parser.add_argument("--json", action="store_true", help="print one JSON object a line instead of a progress bar")
    parser.set_defaults(func=run)


class StopRequest:
    """Ctrl+C or SIGTERM asks the job to stop after the batch it is on; a second Ctrl+C stops at once."""

    def __init__(self, say: Any) -> None:
        self.requested = False
        self._say = say
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only; a caller in another thread stops the job itself
        for number in (signal.SIGINT, signal.SIGTERM):
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, _frame: FrameType | None) -> None:
        if self.requested and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        self._say("Stopping after this batch… (Ctrl+C again to stop at once; every caption file stays whole)")


class Reporter:
    """Events as JSON lines on stdout (--json), or a progress bar on the terminal and a summary."""

    def __init__(self, as_json: bool, dry_run: bool) -> None:
        self.as_json, self.dry_run = as_json, dry_run
        self.started = time.monotonic()
        self.bar = sys.stderr.isatty() and not as_json

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            # ASCII (other characters as \\u escapes): Windows writes a pipe in its code page, where a folder named
            # Jürgen reached the window as bytes that are not UTF-8 and one named in Chinese ended the job.
            print(json.dumps(event), flush=True)
        elif event["type"] == EVENT_STARTED:  # where it runs: a CPU run is fifty times slower than a GPU's
            self.say(f"Captioning {event['total']} images with {event['model']} on {event['device']} in "
                     f"{event['precision']}, {event['batch_size']} a batch.")
        elif event["type"] == EVENT_PROGRESS and self.bar:
            done, total = event["done"], event["total"]
            rate = done / max(time.monotonic() - self.started, 1e-6)
            filled = int(30 * done / max(total, 1))
            left = int((total - done) / rate) if rate > 0 else 0
            print(f"\r{done}/{total} [{'#' * filled}{'-' * (30 - filled)}] {rate:.1f} images/s, "
                  f"{left // 60}:{left % 60:02d} left", end="", file=sys.stderr, flush=True)
        elif event["type"] == EVENT_WARNING:
            self.say(event["message"])
        elif event["type"] == EVENT_CAPTION and self.dry_run:
            print(f"{Path(event['image']).name}: {event['after'] if event['after'] is not None else '(kept)'}")

    def say(self, message: str) -> None:
        """A message for the person: on stderr, never mixed into --json's stdout."""
        print(("\n" if self.bar else "") + message, file=sys.stderr, flush=True)


def _read_image_list(path: str, folder: Path, images: list[Path]) -> list[Path]:
    """The dataset's images named in `path` (absolute, or relative to the dataset folder), in its order."""
    by_real = {os.path.realpath(image): image for image in images}
    listed, unknown = [], []
    for line in Path(path).read_text(encoding="utf-8-sig").splitlines():  # -sig: a list saved by Notepad
        if line.strip():
            named = Path(line.strip()).expanduser()
            found = by_real.get(os.path.realpath(named if named.is_absolute() else folder / named))
            if found is None:
                unknown.append(line.strip())
            else:
                listed.append(found)
    if unknown:
        raise ValueError(f"{len(unknown)} image(s) listed in {path} are not in the dataset of {folder}: "
                         f"{', '.join(unknown[:3])}. List images of that folder only.")
    return listed


def run(args: argparse.Namespace) -> int:
    from studio.caption.dataset import open_dataset
    from studio.core.dataset.captions.captioner_models import CaptionerNotFound, find_captioner
    from studio.core.dataset.scan import DatasetError

    reporter = Reporter(args.json, args.dry_run)
    try:
        rules = CaptionRules(args.mode, args.prefix, parse_blacklist(args.blacklist), args.threshold,
                             args.character_threshold)
        if args.batch_size is not None and args.batch_size < 1:
            raise ValueError(f"--batch-size {args.batch_size} must be at least 1")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", args.device):  # a tagger would run on the CPU unasked
            raise ValueError(f"--device {args.device} is not a device: use auto, cpu, cuda or cuda:N "
                             "(N: the GPU's number, 0 for the first)")
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens {args.max_tokens} must be at least 1")
        dataset = open_dataset(Path(args.dir).expanduser())
        images = dataset.images
        if args.images_from:
            images = _read_image_list(args.images_from, dataset.folder, images)
        dataset.check_captions_are_read(images)
        source = find_captioner(args.model)
    except (ValueError, DatasetError, CaptionerNotFound, OSError) as exc:
        if args.json:
            from studio.caption.job import JobResult, finished_event

            reporter(finished_event(JobResult(status="failed"), str(exc)))
        reporter.say(f"error: {exc}")
        return EXIT_INVALID
    return _caption(args, dataset, images, source, rules, reporter)


def _caption(args: argparse.Namespace, dataset: CaptionDataset, images: list[Path], source: CaptionerSource,
             rules: CaptionRules, reporter: Reporter) -> int:
    from studio.caption.base import CaptionerError, RunSettings
    from studio.caption.job import CaptionJob, JobResult, finished_event, plan_job
    from studio.caption.progress import CaptionProgress, ProgressWriteError
    from studio.caption.registry import load_captioner

    progress = None
    if not args.dry_run:
        progress = CaptionProgress.open(dataset.folder, {"model": str(source.folder), "rules": rules.to_json()})
        if progress.discarded_other_settings:
            reporter.say("An unfinished captioning job with other settings was found; starting over.")
    plan = plan_job(dataset.store, images, rules, progress)
    if plan.resumed:
        reporter.say(f"Resuming: {plan.resumed} images were captioned by the stopped job.")
    if not plan.todo:
        if progress is not None:
            progress.finish()
        reporter(finished_event(JobResult(), "nothing to caption"))
        if not args.json:
            print(f"Nothing to caption: {_nothing_reason(plan, rules)}")
        return EXIT_OK
    settings = RunSettings(args.device, args.precision, args.batch_size, args.max_tokens)
    with StopRequest(reporter.say) as stop:
        job = CaptionJob(dataset.store, rules, reporter, write=not args.dry_run, progress=progress,
                         should_stop=lambda: stop.requested, token_limit=dataset.token_reader()[0])
        try:
            captioner = load_captioner(source, settings)
            result = job.run(captioner, plan)
        except (CaptionerError, ProgressWriteError) as exc:
            reporter(finished_event(JobResult(status="failed"), str(exc)))
            reporter.say(f"error: {exc}")
            return EXIT_FAILED
        except Exception as exc:  # the job's boundary: say what broke; every caption file written is whole
            traceback.print_exc(file=sys.stderr)
            message = (f"The captioner failed: {type(exc).__name__}: {exc}. The captions written so far are "
                       "saved; run the same command again to resume.")
            reporter(finished_event(JobResult(status="failed"), message))
            reporter.say(f"error: {message}")
            return EXIT_FAILED
    reporter(finished_event(result))
    if not args.json:
        _summary(result, source.name, args.dry_run, len(plan.todo), dataset.token_reader())
    return EXIT_INTERRUPTED if result.status == "stopped" else EXIT_OK


def _nothing_reason(plan: JobPlan, rules: CaptionRules) -> str:
    if plan.kept and rules.mode == "fill-missing":
        return (f"all {plan.kept} images have a caption (use --mode append to add to them, "
                "or --mode replace to replace them).")
    if plan.resumed:
        return f"the {plan.resumed} images were all captioned by an earlier run of this job."
    return "the dataset has no images."


def _summary(result: JobResult, model: str, dry_run: bool, total: int, reader: tuple[int, str]) -> None:
    verb = "would change" if dry_run else "wrote"
    print(f"{'' if not sys.stderr.isatty() else chr(10)}Captioned {result.captioned} of {total} images with {model}: "
          f"{verb} {result.written if not dry_run else result.captioned - result.unchanged} captions, "
          f"{result.unchanged} left as they were.")
    if result.long_captions:
        names = ", ".join(p.name for p in result.long_captions[:5])
        limit, encoder = reader
        print(f"{len(result.long_captions)} captions are longer than {encoder}'s {limit} tokens "
              f"(the rest is cut off in training): {names}")
    if result.status == "stopped":
        print("Stopped. Run the same command again to caption the rest.")
    if result.problems:
        count = len(result.problems)
        print(f"{count} problem{'s' if count != 1 else ''}; see the messages above.")
