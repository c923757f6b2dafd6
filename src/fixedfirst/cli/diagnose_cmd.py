"""`fixedfirst diagnose`: the update diagnostic (Figure 4) on a fixed-first run."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fixedfirst.cli.arguments import add_data_argument, parse_depths
from fixedfirst.config.limits import MAX_SEED
from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.writing import write_atomic, write_json_atomic

if TYPE_CHECKING:
    from fixedfirst.studies.diagnose.runner import Diagnosis

PER_SEQUENCE_FILE = "benefit_per_sequence.npy"
"""Beside results.json: the benefit per (u, batch, held-out sequence, serving depth), whose
SHA-256 results.json records, so that the two are never read from different runs."""


def parse_updates(text: str) -> list[int]:
    """'0,1,2,4,8,16,32' -> [0, 1, 2, 4, 8, 16, 32]; every value an integer >= 0."""
    try:
        updates = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"--updates {text!r}: expected comma-separated integers, e.g. 0,1,2,4,8,16,32"
        ) from None
    if not updates or min(updates) < 0:
        raise UserError(f"--updates {text!r}: expected integers >= 0, e.g. 0,1,2,4,8,16,32")
    return sorted(set(updates))


def parse_pair(text: str) -> tuple[int, int]:
    """'4,16' -> (4, 16): the shallow depth first. Equal depths are allowed (a null check)."""
    try:
        a, b = (int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--depths {text!r}: expected two depths, e.g. 4,16") from None
    if min(a, b) < 1:
        raise UserError(f"--depths {text!r}: depths must be >= 1")
    return a, b


def check_out_dir(out: Path) -> None:
    """Refuse an --out that cannot be made, without making it yet: the run may still be
    refused (no switch checkpoint, --updates beyond it...), and a refused command leaves the disk
    as it was. The directory is created once the results exist."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"cannot create --out {out}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot create --out {out}: {existing} is not writable")
    from fixedfirst.files.writing import is_our_figure, is_our_json

    for name, ours in (
        ("results.json", is_our_json),
        ("figure4.png", is_our_figure),
        ("report.json", is_our_json),
        ("report.md", lambda path: is_our_json(path.with_suffix(".json"))),
    ):
        if (out / name).exists() and not ours(out / name):
            raise UserError(
                f"--out {out} holds a {name} that fixedfirst did not write; nothing was "
                "written (choose another --out)"
            )
    if (out / PER_SEQUENCE_FILE).exists() and not _named_by_results(out):
        raise UserError(
            f"--out {out} holds a {PER_SEQUENCE_FILE} that its results.json does not name "
            "(not written by fixedfirst, or left by an interrupted run); nothing was written "
            "(remove it or choose another --out)"
        )


def _named_by_results(out: Path) -> bool:
    """The per-sequence file in `out` is the one its results.json records (by checksum)."""
    from fixedfirst.runs.checkpoint import sha256

    try:
        recorded = json.loads((out / "results.json").read_text())["per_sequence"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return recorded == sha256(out / PER_SEQUENCE_FILE)


def write_diagnosis(diagnosis: Diagnosis, out: Path) -> dict[str, Any]:
    """The per-sequence array first, then results.json naming it by checksum (a crash between
    the two leaves a pair that `check_out_dir` and any reader can tell apart); return the
    results as written."""
    import numpy as np

    from fixedfirst.runs.checkpoint import sha256

    def save(path: Path) -> None:
        with open(path, "wb") as f:
            np.save(f, diagnosis.benefit_per_sequence)

    write_atomic(out / PER_SEQUENCE_FILE, save)
    results = dict(diagnosis.results)
    results["per_sequence"] = {
        **results["per_sequence"],
        "file": PER_SEQUENCE_FILE,
        "sha256": sha256(out / PER_SEQUENCE_FILE),
    }
    write_json_atomic(out / "results.json", {"format": "fixedfirst-diagnose", **results})
    return results


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a fixed-first run directory")
    parser.add_argument(
        "--updates",
        default="0,1,2,4,8,16,32",
        help="finishing updates after the checkpoint at which to measure (default %(default)s)",
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=32,
        help="training batches (update pairs) per u, >= 2 (default %(default)s)",
    )
    parser.add_argument(
        "--depths",
        default="4,16",
        metavar="A,B",
        help="the two update depths; Benefit = NLL after A - NLL after B (default %(default)s)",
    )
    parser.add_argument(
        "--serving-depths",
        default="1..16",
        help="held-out serving depths, averaged for the headline (default %(default)s)",
    )
    parser.add_argument(
        "--checkpoint",
        default="switch",
        metavar="TAG|STEP",
        help="checkpoint to start from: a tag or a step (default: the fixed-first switch)",
    )
    parser.add_argument(
        "--heldout",
        type=int,
        default=32,
        metavar="N",
        help="validation sequences in the fixed held-out set (default %(default)s)",
    )
    parser.add_argument(
        "--rms-reference",
        default="geometric-mean",
        choices=["geometric-mean", "shallow", "deep"],
        help="common RMS the two updates are rescaled to (default %(default)s)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=2000,
        metavar="N",
        help="bootstrap resamples per interval (default %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the pair updates' initial-state draws and of the bootstrap",
    )
    add_data_argument(parser)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--out", metavar="DIR", help="output directory (default RUN/diagnose)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.diagnose.figure import plot_figure4
    from fixedfirst.studies.diagnose.report import report_markdown, report_numbers
    from fixedfirst.studies.diagnose.runner import DiagnoseOptions, run_diagnostic
    from fixedfirst.studies.kit.report_files import write_numbers_and_report

    if not Path(args.run_dir).is_dir():
        raise UserError(f"run directory {args.run_dir} does not exist")
    if not 0 <= args.seed <= MAX_SEED:
        raise UserError(f"--seed must be in [0, 2**63 - 1], got {args.seed}")
    options = DiagnoseOptions(
        updates=parse_updates(args.updates),
        batches=args.batches,
        depths=parse_pair(args.depths),
        serving_depths=parse_depths(args.serving_depths),
        checkpoint=args.checkpoint,
        heldout=args.heldout,
        rms_reference=args.rms_reference,
        resamples=args.resamples,
        seed=args.seed,
        device=args.device,
        data=args.data,
    )
    out = Path(args.out) if args.out else Path(args.run_dir) / "diagnose"
    check_out_dir(out)
    # Into the run (the default): one writer at a time, as for every file of a run.
    into_run = args.out is None
    hint = "give --out DIR to write the results elsewhere"
    with locks.holding(args.run_dir, "diagnose", hint) if into_run else contextlib.nullcontext():
        diagnosis = run_diagnostic(args.run_dir, options, quiet=args.quiet)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create --out {out}: {e.strerror or e}") from None
        results = write_diagnosis(diagnosis, out)
        plot_figure4(results, out / "figure4.png")
        numbers = report_numbers(results, diagnosis.benefit_per_sequence)
        report = write_numbers_and_report(out, numbers, report_markdown)
    print(report, end="")
    names = ("results.json", PER_SEQUENCE_FILE, "figure4.png", "report.json", "report.md")
    seconds = results["timing"]["total_s"]
    print("\nwrote " + ", ".join(str(out / name) for name in names) + f" ({seconds:.0f} s)")
    return 0
