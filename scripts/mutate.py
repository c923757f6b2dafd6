"""Mutation practice: break the code that decides research results on purpose, one curated mutant at
a time, and check that the tests notice.

Each mutant in scripts/mutants.toml replaces one exact piece of source (it must occur exactly
once) by a wrong version of the kind a careful contributor could write: a wrong depth, a dropped
scaling, an off-by-one in a schedule or a cache, a dropped FLOP term, state not restored on
resume. For each, the tests it names (a subset of `make test`: `-m "not slow"`, so a mutant they
kill is killed by `make test`) run against the mutated tree; the mutant is killed when they fail.
The file is restored after every mutant, also on Ctrl-C or SIGTERM, and a backup in
.mutate-backup.json restores it after a hard kill on the next start.

    python scripts/mutate.py                 # every mutant; a table of killed / survived
    python scripts/mutate.py --only ID ...   # some of them
    python scripts/mutate.py --check         # every mutant applies and compiles (seconds)
    python scripts/mutate.py --list

Run it in a tree where nothing else runs tests: the mutated file is the working copy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "scripts" / "mutants.toml"
BACKUP = ROOT / ".mutate-backup.json"
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider"]
PYTEST += ["--no-header"]


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    what: str

    @property
    def path(self) -> Path:
        return ROOT / self.file

    def mutated(self, source: str) -> str:
        """`source` with the mutation applied; ValueError unless `find` occurs exactly once."""
        count = source.count(self.find)
        if count != 1:
            raise ValueError(f"{self.id}: {self.find!r} occurs {count} times in {self.file}")
        return source.replace(self.find, self.replace)


def load_mutants(path: Path = MUTANTS) -> list[Mutant]:
    entries = tomllib.loads(path.read_text())["mutant"]
    mutants = [
        Mutant(e["id"], e["file"], e["find"], e["replace"], tuple(e["tests"]), e["what"])
        for e in entries
    ]
    ids = [m.id for m in mutants]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"mutant ids used twice: {', '.join(duplicated)}")
    return mutants


def check(mutant: Mutant) -> None:
    """The mutant applies to today's source, changes it, compiles, and names existing tests."""
    source = mutant.path.read_text()
    mutated = mutant.mutated(source)
    if mutated == source:
        raise ValueError(f"{mutant.id}: the replacement changes nothing")
    compile(mutated, str(mutant.path), "exec")
    for test in mutant.tests:
        file, _, name = test.partition("::")
        if not (ROOT / file).is_file():
            raise ValueError(f"{mutant.id}: no test file {test}")
        name = name.split("[")[0]
        if name and not re.search(rf"^def {re.escape(name)}\(", (ROOT / file).read_text(), re.M):
            raise ValueError(f"{mutant.id}: no test {name} in {file}")


def restore_leftovers() -> None:
    """Put back a file a hard-killed earlier run left mutated."""
    if not BACKUP.exists():
        return
    saved = json.loads(BACKUP.read_text())
    (ROOT / saved["file"]).write_text(saved["source"])
    os.utime(ROOT / saved["file"], ns=(saved["atime_ns"], saved["mtime_ns"]))
    BACKUP.unlink()
    print(f"restored {saved['file']} left mutated by an interrupted run", file=sys.stderr)


def run_tests(tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """(outcome, detail): 'passed', 'failed' with the first failing test (pytest exit 1, or 2
    when the mutant breaks an import), 'timeout', or 'error' when no test judged the mutant (every
    named test deselected as slow, a test id that does not exist)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            [*PYTEST, *tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout:.0f} s"
    if done.returncode == 0:
        return "passed", ""
    if done.returncode not in (1, 2):  # 3 internal error, 4 usage, 5 no test ran: not a kill
        return "error", f"pytest exit {done.returncode}"
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.MULTILINE)
    return "failed", found.group(1) if found else f"pytest exit {done.returncode}"


def run_mutant(mutant: Mutant, timeout: float) -> tuple[str, str, float]:
    """Apply, test, restore (whatever happens); return (result, detail, seconds)."""
    source = mutant.path.read_text()
    stat = mutant.path.stat()
    mutated = mutant.mutated(source)
    backup = {
        "file": mutant.file,
        "source": source,
        "atime_ns": stat.st_atime_ns,
        "mtime_ns": stat.st_mtime_ns,
    }
    BACKUP.write_text(json.dumps(backup))
    started = time.perf_counter()
    try:
        mutant.path.write_text(mutated)
        outcome, detail = run_tests(mutant.tests, timeout)
    finally:
        mutant.path.write_text(source)
        os.utime(mutant.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        BACKUP.unlink()
    result = {"failed": "killed", "passed": "SURVIVED", "timeout": "timeout", "error": "error"}[
        outcome
    ]
    return result, detail, time.perf_counter() - started


def stop_on_signal(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    parser.add_argument("--check", action="store_true", help="check that every mutant applies")
    parser.add_argument("--list", action="store_true", help="list the mutants")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutant's tests")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip running the tests unmutated first"
    )
    args = parser.parse_args(argv)
    mutants = load_mutants()
    if args.only:
        unknown = sorted(set(args.only) - {m.id for m in mutants})
        if unknown:
            parser.error(f"unknown mutant id(s): {', '.join(unknown)}")
        mutants = [m for m in mutants if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:34s} {m.file:44s} {m.what}")
        return 0
    problems = []
    for m in mutants:
        try:
            check(m)
        except (ValueError, SyntaxError) as e:
            problems.append(str(e))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.check:
        print(f"{len(mutants)} mutants apply and compile")
        return 0

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGHUP, stop_on_signal)
    restore_leftovers()
    if not args.no_baseline:  # a test that fails anyway would kill every mutant
        tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
        outcome, detail = run_tests(tests, args.timeout * 2)
        if outcome != "passed":
            print(f"the unmutated tree fails its tests ({outcome}: {detail}); fix that first")
            return 1
    rows = []
    print("| mutant | file | result | killed by | s |\n| --- | --- | --- | --- | ---: |")
    for m in mutants:
        result, detail, seconds = run_mutant(m, args.timeout)
        rows.append(result)
        short = m.file.removeprefix("src/fixedfirst/")
        print(f"| {m.id} | {short} | {result} | {detail} | {seconds:.0f} |", flush=True)
    killed = rows.count("killed")
    print(f"\n{killed} of {len(rows)} mutants killed ({100 * killed / len(rows):.0f}%)")
    for m, result in zip(mutants, rows, strict=True):
        if result != "killed":
            print(f"{result}: {m.id} ({m.file}): {m.what}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
