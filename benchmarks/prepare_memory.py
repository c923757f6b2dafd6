"""Benchmark: the peak memory of `fixedfirst prepare` against the size of its input.

    .venv/bin/python benchmarks/prepare_memory.py [--baseline REV] [--sizes 1,2,4,8]
                                                 [--large 32,128] [--out FILE]

Each cell is one `python -m fixedfirst prepare` in a child process, and its peak memory is the
child's own peak resident set (`ru_maxrss` from `os.wait4`), so nothing of this process counts.
The input is generated text (a Zipf-distributed vocabulary of 20,000 made-up words in lines and
paragraphs, fixed seed), given in two shapes: one file (the most common shape of a real corpus,
one document), and the same text cut into files of 16 KB (a directory of many documents). The
tokenizer is a BPE of 2,048 ids, or the byte-level one.

The inputs are generated and written by a child process of their own: a child's peak counts the
pages it shares with this process between its fork and its exec, so this process never holds
the text (at 128 MB it would have set every cell's peak at 441 MiB).

With `--baseline REV` the same cells run on that revision's `src/` (exported with `git archive`)
beside this tree's, alternating which goes first, so both meet the same load; `--large` sizes run
on this tree only (the baseline's memory at them is what the table's trend says it would be).
The first row is the interpreter with fixedfirst's data modules and `tokenizers` imported and
nothing prepared: what every cell pays before reading any text.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MANY_FILE_BYTES = 16 << 10
VOCAB = 2048
IMPORTS = "import fixedfirst.cli.main, fixedfirst.data.prepare, tokenizers"


def export_source(revision: str, into: Path) -> Path:
    """`src/` of `revision`, extracted under `into`."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def generated_text(nbytes: int, seed: int = 57) -> str:
    """About `nbytes` of English-shaped text: words of a Zipfian vocabulary, lines of 6 to 16
    words, a blank line every 2 to 8 lines."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = 1.0 / np.arange(1, 27) ** 0.9
    lengths = rng.integers(2, 11, 20_000)
    words = ["".join(rng.choice(letters, size=n, p=weights / weights.sum())) for n in lengths]
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    pieces: list[str] = []
    size = 0
    while size < nbytes:
        line = " ".join(words[i] for i in rng.choice(len(words), rng.integers(6, 17), p=zipf))
        line += ".\n\n" if rng.random() < 0.2 else "\n"
        pieces.append(line)
        size += len(line)
    return "".join(pieces)


def write_input(text: str, shape: str, into: Path) -> Path:
    """The text as one file, or cut into files of about MANY_FILE_BYTES at line ends."""
    if shape == "one file":
        into.mkdir(parents=True)
        (into / "corpus.txt").write_text(text)
        return into / "corpus.txt"
    into.mkdir(parents=True)
    start, index = 0, 0
    while start < len(text):
        end = text.find("\n", start + MANY_FILE_BYTES)
        end = len(text) if end < 0 else end + 1
        (into / f"part-{index:05d}.txt").write_text(text[start:end])
        start, index = end, index + 1
    return into


def make_input(mb: int, shape: str, into: Path) -> Path:
    """The input of `mb` MB in `shape`, written by a child process (see the module docstring)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from prepare_memory import *; "
        "write_input(generated_text(int(sys.argv[2]) << 20), sys.argv[3], Path(sys.argv[4]))"
    )
    here = str(Path(__file__).resolve().parent)
    subprocess.run([sys.executable, "-c", code, here, str(mb), shape, str(into)], check=True)
    return into / "corpus.txt" if shape == "one file" else into


def peak_of(command: list[str], src: Path) -> tuple[float, float]:
    """(peak resident MiB, wall-clock s) of `command` run with `src` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed ({os.waitstatus_to_exitcode(status)})")
    return usage.ru_maxrss / 1024, seconds  # ru_maxrss is in KiB on Linux


def prepare_command(path: Path, out: Path, tokenizer: str) -> list[str]:
    command = [sys.executable, "-m", "fixedfirst", "prepare", str(path), "--out", str(out)]
    if tokenizer == "bpe":
        command += ["--tokenizer", "bpe", "--vocab-size", str(VOCAB)]
    return command


def sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


SHAPES = (("one file", "bpe"), ("16 KB files", "bpe"), ("one file", "byte"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="git revision to compare against")
    parser.add_argument("--sizes", default="1,2,4,8", help="input MB, both trees")
    parser.add_argument("--large", default="32,128", help="input MB, this tree only")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    peaks: dict[tuple[str, str, str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="prepare-memory-") as tmp:
        trees = {"this tree": ROOT / "src"}
        if args.baseline:
            base = export_source(args.baseline, Path(tmp) / "base")
            trees = {"baseline": base, **trees}
        for name, src in trees.items():
            peaks[(name, "imports only", "-", "-")] = peak_of([sys.executable, "-c", IMPORTS], src)
        plan = [(mb, list(trees)) for mb in sizes(args.sizes)]
        plan += [(mb, ["this tree"]) for mb in sizes(args.large)]
        for mb, names in plan:
            for shape, tokenizer in SHAPES:
                case = Path(tmp) / f"{mb}-{shape}-{tokenizer}".replace(" ", "_")
                path = make_input(mb, shape, case / "input")
                for i, name in enumerate(names if mb % 2 else list(reversed(names))):
                    out = case / f"out-{i}"
                    peak = peak_of(prepare_command(path, out, tokenizer), trees[name])
                    peaks[(name, f"{mb} MB", shape, tokenizer)] = peak
                    print(
                        f"{name}: {mb} MB, {shape}, {tokenizer}: {peak[0]:,.0f} MiB, "
                        f"{peak[1]:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    baseline = f"baseline {args.baseline}" if args.baseline else "baseline"
    table = [
        f"| input | shape | tokenizer | {baseline}: peak MiB | this tree: peak MiB "
        f"| {baseline} / this tree | this tree: wall-clock s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    cases = dict.fromkeys(key[1:] for key in peaks)
    for size, shape, tokenizer in cases:
        mine = peaks[("this tree", size, shape, tokenizer)]
        theirs = peaks.get(("baseline", size, shape, tokenizer))
        before = f"{theirs[0]:,.0f}" if theirs else "-"
        ratio = f"{theirs[0] / mine[0]:.2f}x" if theirs else "-"
        wall = "-" if size == "imports only" else f"{mine[1]:.1f}"
        table.append(
            f"| {size} | {shape} | {tokenizer} | {before} | {mine[0]:,.0f} | {ratio} | {wall} |"
        )
    text = "\n".join(table) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
