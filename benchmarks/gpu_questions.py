"""The paper's open questions at a GPU's scale, in one command that fits a device window (issue 71):
does fixed-depth training collapse off depth, and does fixed-first match uniform where depth is
used? From the source tree with no install step, as benchmarks/first_run.py:

    PYTHONPATH=src python3 benchmarks/gpu_questions.py --out $OUT/gpu-questions [--budget 480]
    PYTHONPATH=src python3 benchmarks/gpu_questions.py --smoke --out DIR     # the CPU, toy sizes

The budget (seconds, default 480) is spent in this order, each part's share of what is left
fixed in SHARES; a part, or the seeds and repeats of one, that would not fit is skipped with a
row saying so:

1. figure 1: the bios recall study of configs/gpu/bios-loop.toml at the largest modeled FLOPs
   that lets three arms run three seeds (fixed-first K0 = 4 at 0.8 too, if then at its target);
2. language model: configs/gpu/lm-code.toml on this machine's Python standard library as bytes;
   does serving deeper than 4 gain at least 3% of uniform's NLL (GAIN_BAR)?
3. savings: fixed-first K0 = 2 at 0.67 against uniform 1..16, whole runs of lm-200m's model timed.

Before each part its model's training step is measured at depths 1, 4 and 16 (compiled when the
part's runs compile, in the cache they share), and the part is planned on that MFU with the
library's plan (`fixedfirst plan`'s table); the plan is printed before the part runs
(benchmarks/gpu_budget.py: the report, the budget, the warm-up and the plan). Each row is printed
as it is made; OUT/gpu-questions.json holds every row and number (rewritten after each row),
OUT/gpu-questions.md is made from it alone (`markdown`), and each part's own report is copied
beside them: eight files, what the device tool brings back. The runs themselves live in --work
(default: a temporary folder), not in OUT. `--no-compile` trains every run eagerly. `--smoke`
runs every part on the CPU at toy size (make test runs it, tests/test_gpu_questions.py). Exit
status 1 when a part failed (its row says why; the parts after it still run).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_budget import (  # benchmarks/, this script's own directory
    Budget,
    Report,
    Setup,
    copy_out,
    cpu_seconds,
    environment,
    fewest_steps,
    fits_again,
    largest_scale,
    measured_mfu,
    part_budget,
    print_plan,
    too_short,
    training_seconds,
)

import fixedfirst.tasks  # noqa: F401  (registers the bios data kind)
from fixedfirst.compute.plan import plan_run
from fixedfirst.config import RunConfig, ScheduleConfig, read_toml
from fixedfirst.machine.planning import plan_on_gpus
from fixedfirst.studies.kit.presets import PAPER_SCHEDULES
from fixedfirst.train.compilation import STUDY_CACHE, shared_cache

ROOT = Path(__file__).resolve().parents[1]
BIOS_PRESET = ROOT / "configs/gpu/bios-loop.toml"
LM_SWEEP = ROOT / "configs/gpu/lm-code.toml"
LM_200M = ROOT / "configs/lm-200m.toml"

PARTS = ("figure 1", "language model", "savings")
GAIN_BAR = 0.03
"""Serving deeper than 4 should gain at least this share of uniform's NLL at depth 4."""
K0_4 = "fixed-first-4-0.8"

POOLS = "first_names middle_names last_names cities universities majors employers"
SMOKE = {
    "figure 1": [
        "data.bios.people=12",
        *(f"data.bios.{pool}=16" for pool in POOLS.split()),
        "experiment.depths=[1, 2, 4, 8, 16]",  # recall's cost is its deepest depth's
        "experiment.recall_people=12",
        "model.vocab_size=244",
        "model.d_model=16",
        "model.n_heads=2",
        "train.batch_size=8",
        "train.compile=false",
        "train.precision=fp32",
        "train.device=cpu",
        "eval.batches=1",
    ],
    "language model": {
        "model": {"d_model": 16, "n_heads": 2, "max_seq_len": 32},
        "train": {
            "seq_len": 32,
            "batch_size": 8,
            "compile": False,
            "precision": "fp32",
            "device": "cpu",
        },
        "eval": {"batches": 1},
        "sweep": {"heldout_rows": 32, "heldout_blocks": 8},
    },
    "savings": {
        "d_model": 16,
        "n_heads": 2,
        "vocab_size": 256,
        "max_seq_len": 32,
        "n_prelude": 1,
        "n_core": 1,
        "n_coda": 1,
    },
}
"""Toy sizes of --smoke: every part's code at a size two CPU cores run in seconds."""
SMOKE_TARGET = {"figure 1": 3e9, "language model": 8 * 32 * 16}
"""--smoke's targets in place of the presets' (3.2e15 FLOPs; 2000 steps of 64 x 256 tokens)."""
SMOKE_STDLIB_FILES = 24


# -- 1. Figure 1 at scale ---------------------------------------------------------------------


def figure1(report: Report, s: Setup, budget: Budget) -> None:
    from fixedfirst.studies.bios.experiment import BiosStudy
    from fixedfirst.studies.bios.report import findings, primary_findings
    from fixedfirst.studies.kit.conduct import conduct

    part, started = "figure 1", time.monotonic()
    record: dict[str, Any] = {"preset": str(BIOS_PRESET.relative_to(ROOT))}
    report.data["parts"][part] = record
    share = part_budget(report, part, budget, record)
    if share is None:
        return
    smoke = (SMOKE[part] if s.smoke else []) + ([] if s.compile else ["train.compile=false"])
    preset = BiosStudy.load(str(BIOS_PRESET)).experiment
    target = SMOKE_TARGET[part] if s.smoke else preset.flops
    all_arms, out = preset.schedules, s.work / "bios"

    def study(flops: float, arms: list[str]) -> BiosStudy:
        listed = ", ".join(f'"{a}"' for a in arms)
        overrides = [*smoke, f"experiment.flops={flops!r}", f"experiment.schedules=[{listed}]"]
        return BiosStudy.load(str(BIOS_PRESET), overrides)

    first = study(target, all_arms)
    hardware = measured_mfu(report, part, first.runs()[0].config, s, out / STUDY_CACHE)
    seconds = training_seconds(report, part, share, started)
    if seconds is None:
        return

    def configs(st: BiosStudy) -> dict[str, RunConfig]:
        return {r.name: r.config for r in st.runs()}

    scale_all = largest_scale(configs(first), hardware, seconds, s.smoke)
    arms = all_arms
    if scale_all < 1:
        arms = [a for a in all_arms if a != K0_4]
        record["left_out"] = {
            "arm": K0_4,
            "why": f"all four arms would reach {scale_all * target:.3g} FLOPs a run, below the "
            f"target {target:.3g}",
        }
    scale = largest_scale(configs(study(target, arms)), hardware, seconds, s.smoke)
    chosen = study(scale * target, arms)
    steps = fewest_steps(configs(chosen))
    record.update(
        target_flops=target,
        scale_all_arms=scale_all,
        arms=arms,
        flops=chosen.experiment.flops,
        fewest_steps=steps,
    )
    report.row(
        part,
        "budget per run",
        f"{chosen.experiment.flops:.3g} modeled FLOPs ({scale:.2f} x the "
        f"target {target:.3g}); {len(arms)} arms x {len(chosen.experiment.seeds)} seeds"
        + (f"; {K0_4} left out: {record['left_out']['why']}" if "left_out" in record else ""),
    )
    if too_short(report, part, steps, s):
        return
    record["planned_train_s"] = print_plan(report, part, configs(chosen), hardware)
    results = None
    for seed in chosen.experiment.seeds:
        names = frozenset(f"{arm}-seed{seed}" for arm in arms)
        if seed != chosen.experiment.seeds[0] and not fits_again(record, started, share):
            report.row(part, f"seed {seed}", "skipped: the part's share is spent")
            record.setdefault("skipped_seeds", []).append(seed)
            continue
        seed_started = time.monotonic()
        results = conduct(chosen, out, True, None, only=names).results
        record["last_group_s"] = time.monotonic() - seed_started
        ceiling = results["ceiling_bits"]
        for name in sorted(names, key=[f"{a}-seed{seed}" for a in arms].index):
            run = results["runs"][name]
            final = {
                r["depth"]: r["bits_per_person"]
                for r in results["recall"]
                if f"{r['schedule']}-seed{r['seed']}" == name and r["budget_fraction"] == 1.0
            }
            record.setdefault("runs", {})[name] = {
                "steps": run["steps"],
                "flops": run["flops"],
                "wall_s": run["wall_s"],
            }
            report.row(
                part,
                name,
                f"{run['steps']} steps, {run['flops']:.3g} FLOPs, {run['wall_s']:.1f} s of "
                f"training; recall at depth 4 {final[4] / ceiling:.1%} of the ceiling, at "
                f"{max(final)} {final[max(final)] / ceiling:.1%}",
            )
    assert results is not None
    record["trained_s"] = sum(r["wall_s"] for r in record["runs"].values())
    for line in primary_findings(results):
        report.row(part, "primary claim", line)
    for line in findings(results):
        if line.startswith("Figure 1's contrast"):
            report.row(part, "contrast with fixed K = 4", line)
    copy_out(
        report,
        {
            "bios-report.json": out / "report.json",
            "bios-report.md": out / "report.md",
            "figure1.png": out / "figure1.png",
        },
    )
    record["elapsed_s"] = time.monotonic() - started


# -- 2. Where depth is used: the language model ---------------------------------------------


def stdlib_data(report: Report, s: Setup, given: Path | None) -> Path:
    """A prepared byte-level folder of this Python's standard library (scripts/fetch_pystdlib.sh's
    files, as `fixedfirst prepare` tokenizes them), or the one --data names."""
    from fixedfirst.data.prepare import PrepareOptions, prepare

    if given is not None:
        return given.resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    skip.add("ensurepip")  # scripts/fetch_pystdlib.sh's exclusions
    files = sorted(
        str(f)
        for f in stdlib.rglob("*.py")
        if f.is_file() and not skip & set(f.relative_to(stdlib).parts[:-1])
    )
    if s.smoke:
        files = [f for f in files if "/" not in f.removeprefix(str(stdlib) + "/")]
        files = files[:: max(1, len(files) // SMOKE_STDLIB_FILES)][:SMOKE_STDLIB_FILES]
    out = s.work / "pystdlib-byte"
    started = time.perf_counter()
    meta = prepare(files, out, PrepareOptions(val_fraction=0.05)).meta
    splits = meta["splits"]
    report.row(
        "language model",
        "data",
        f"Python {platform.python_version()}'s standard library, {len(files)} .py files: "
        f"{splits['train']['tokens']:,} training and {splits['val']['tokens']:,} held-out bytes "
        f"(prepared in {time.perf_counter() - started:.1f} s)",
    )
    return out


def depth_gain(nll_by_depth: dict[str, float]) -> float:
    """How much less NLL the best serving depth beyond 4 has than depth 4, as a share of it."""
    nll = {int(k): v for k, v in nll_by_depth.items()}
    return 1 - min(v for k, v in nll.items() if k > 4) / nll[4]


def language_model(report: Report, s: Setup, budget: Budget, data: Path | None) -> None:
    from fixedfirst.studies.sweep.runner import run_sweep
    from fixedfirst.studies.sweep.spec import parse_sweep

    part, started = "language model", time.monotonic()
    record: dict[str, Any] = {"sweep": str(LM_SWEEP.relative_to(ROOT)), "bar": GAIN_BAR}
    report.data["parts"][part] = record
    share = part_budget(report, part, budget, record)
    if share is None:
        return
    raw = read_toml(LM_SWEEP)
    if s.smoke:
        for section, values in SMOKE[part].items():
            table = raw["sweep"] if section == "sweep" else raw["base"].setdefault(section, {})
            table.update(values)
    raw["base"]["train"]["device"] = s.device.type
    if not s.compile:
        raw["base"]["train"]["compile"] = False
    raw["base"]["data"]["path"] = str(stdlib_data(report, s, data))
    target = SMOKE_TARGET[part] if s.smoke else raw["base"]["train"]["tokens"]
    all_seeds = list(raw["sweep"]["seeds"])
    out = s.work / "lm"

    def spec(tokens: float, seeds: list[int]):
        t = raw["base"]["train"]
        step = t["batch_size"] * t["seq_len"]
        changed = {**raw, "sweep": {**raw["sweep"], "seeds": seeds}}
        if len(seeds) < 2:  # claims are decided over seeds: one seed decides none
            changed["claims"] = []
        changed["base"] = {
            **raw["base"],
            "train": {**t, "tokens": max(1, round(tokens / step)) * step},
        }
        return parse_sweep(changed, LM_SWEEP)

    def configs(sp) -> dict[str, RunConfig]:
        return {r.name: r.config for r in sp.runs}

    first = spec(target, all_seeds)
    hardware = measured_mfu(report, part, first.runs[0].config, s, out / STUDY_CACHE)
    seconds = training_seconds(report, part, share, started)
    if seconds is None:
        return
    scale = largest_scale(configs(first), hardware, seconds, s.smoke)
    seeds = all_seeds
    if scale < 1:
        seeds = all_seeds[:1]
        record["left_out"] = {
            "seeds": all_seeds[1:],
            "why": f"three seeds would train {scale * target:,.0f} tokens a run, below the "
            f"target {target:,}",
        }
        scale = largest_scale(configs(spec(target, seeds)), hardware, seconds, s.smoke)
    chosen = spec(scale * target, seeds)
    tokens = chosen.runs[0].config.train.tokens
    steps = fewest_steps(configs(chosen))
    record.update(target_tokens=target, tokens=tokens, seeds=seeds, fewest_steps=steps)
    left = (
        f"; seeds {all_seeds[1:]} left out: {record['left_out']['why']}"
        if seeds != all_seeds
        else ""
    )
    report.row(
        part,
        "budget per run",
        f"{tokens:,} tokens ({tokens / target:.2f} x the target {target:,}) for the equal-token "
        f"runs; {len(chosen.runs) // len(seeds)} entries x {len(seeds)} seed(s){left}",
    )
    if too_short(report, part, steps, s):
        return
    record["planned_train_s"] = print_plan(report, part, configs(chosen), hardware)
    results = None
    for seed in seeds:
        names = [r.name for r in chosen.runs if r.config.train.seed == seed]
        if seed != seeds[0] and not fits_again(record, started, share):
            report.row(part, f"seed {seed}", "skipped: the part's share is spent")
            record.setdefault("skipped_seeds", []).append(seed)
            continue
        seed_started = time.monotonic()
        results = run_sweep(chosen, out, only=names, quiet=True, device=s.device.type).results
        record["last_group_s"] = time.monotonic() - seed_started
        for row in results["runs"]:
            if row["name"] not in names:
                continue
            nll = {int(k): v for k, v in row["nll_by_depth"].items()}
            record.setdefault("runs", {})[row["name"]] = {
                "schedule": row["schedule"],
                "seed": row["seed"],
                "steps": row["steps"],
                "flops": row["modeled_flops"],
                "wall_s": row["wall"],
                "modeled_savings": row["modeled_savings"],
                "nll_by_depth": row["nll_by_depth"],
            }
            report.row(
                part,
                row["name"],
                f"{row['steps']} steps, {row['modeled_flops']:.3g} FLOPs, {row['wall']:.1f} s of "
                f"training; NLL 1..16 mean {row['mean_serving_nll']:.4f}, at depth 4 "
                f"{nll[4]:.4f}, at 16 {nll[16]:.4f}; beyond 4 gains "
                f"{depth_gain(row['nll_by_depth']):.2%}",
            )
    assert results is not None
    record["trained_s"] = sum(r["wall_s"] for r in record["runs"].values())
    gains = {
        str(r["seed"]): depth_gain(r["nll_by_depth"])
        for r in record["runs"].values()
        if r["schedule"] == "uniform 1..16"
    }
    mean = statistics.fmean(gains.values())
    record.update(gains=gains, mean_gain=mean, reached=mean >= GAIN_BAR)
    shown = ", ".join(f"seed {k}: {v:.2%}" for k, v in gains.items())
    report.row(
        part,
        f"serving deeper than 4 gains at least {GAIN_BAR:.0%} of uniform's NLL",
        f"{'reached' if record['reached'] else 'not reached'}: {mean:.2%} on average ({shown})",
    )
    for claim in results.get("claims", []):
        interval = (
            f"{claim['mean']:+.4g} [{claim['low']:+.4g}, {claim['high']:+.4g}]"
            if claim["low"] is not None
            else "no interval"
        )
        report.row(
            part,
            "claim",
            f"{claim['text']}: {interval} over {claim['n']} seed(s); {claim['verdict']}",
        )
    copy_out(
        report,
        {
            "lm-results.json": out / "results.json",
            "lm-table.md": out / "table.md",
            "lm-claims.md": out / "claims.md",
        },
    )
    record["elapsed_s"] = time.monotonic() - started


# -- 3. Wall-clock savings ---------------------------------------------------------------------

SAVINGS_SCHEDULES = {
    "uniform 1..16": PAPER_SCHEDULES["uniform-1-16"],
    "fixed-first K0=2 @0.67": PAPER_SCHEDULES["fixed-first-2-0.67"],
}
SAVINGS_STEPS = {"gpu": 100, "smoke": 16}
"""The nominal length of a timed run, which the part's share scales."""


def savings_config(s: Setup, schedule: ScheduleConfig, steps: int) -> RunConfig:
    """lm-200m's model (a toy's with --smoke) on synthetic tokens, one micro-batch a step."""
    base = read_toml(LM_200M)
    model = {**base["model"], **SMOKE["savings"]} if s.smoke else base["model"]
    batch, seq = (4, 32) if s.smoke else (8, base["train"]["seq_len"])
    t = base["train"]
    train = {
        "tokens": steps * batch * seq,
        "batch_size": batch,
        "micro_batch_size": batch,
        "seq_len": seq,
        "lr": t["lr"],
        "warmup": t["warmup"],
        "device": s.device.type,
        "precision": "fp32" if s.smoke else t["precision"],
        "compile": t["compile"] and s.compile and not s.smoke,
        "seed": 420,
        "log_every": 1000,
        "checkpoint_every": 1_000_000,
    }
    return RunConfig.from_dict(
        {
            "model": model,
            "schedule": dataclasses.asdict(schedule),
            "train": train,
            "data": {"kind": "synthetic"},
            "eval": {"depths": [1], "batches": 1},
        }
    )


def savings(report: Report, s: Setup, budget: Budget) -> None:
    from fixedfirst.train.trainer import Trainer

    part, started = "savings", time.monotonic()
    record: dict[str, Any] = {}
    report.data["parts"][part] = record
    share = part_budget(report, part, budget, record)
    if share is None:
        return
    lm = report.data["parts"].get("language model", {}).get("runs", {})
    for name, run in lm.items():  # the language model's whole runs, already timed
        if run["schedule"].startswith("fixed-first"):
            uniform = lm.get(f"uniform-seed{run['seed']}")
            if uniform is not None:
                measured = 1 - run["wall_s"] / uniform["wall_s"]
                record.setdefault("language_model", {})[name] = {
                    "measured": measured,
                    "modeled": run["modeled_savings"],
                }
                report.row(
                    part,
                    f"{name} against uniform-seed{run['seed']} (part 2)",
                    f"training wall-clock saved {measured:.1%}, modeled "
                    f"{run['modeled_savings']:.1%}",
                )
    nominal_steps = SAVINGS_STEPS["smoke" if s.smoke else "gpu"]
    nominal = {n: savings_config(s, sch, nominal_steps) for n, sch in SAVINGS_SCHEDULES.items()}
    cache = s.work / "savings" / STUDY_CACHE
    hardware = measured_mfu(report, part, nominal["uniform 1..16"], s, cache)
    seconds = training_seconds(report, part, share, started)
    if seconds is None:
        return
    repeats = 2
    scale = largest_scale(nominal, hardware, seconds / repeats, s.smoke)
    if scale * nominal_steps < 2 * s.min_steps:
        repeats = 1
        scale = largest_scale(nominal, hardware, seconds, s.smoke)
    steps = int(scale * nominal_steps)
    record.update(steps=steps, repeats=repeats)
    if too_short(report, part, steps, s):
        return
    configs = {n: savings_config(s, sch, steps) for n, sch in SAVINGS_SCHEDULES.items()}
    record["planned_train_s"] = print_plan(report, part, configs, hardware)
    plans = {n: plan_on_gpus(c, hardware).seconds(False) for n, c in configs.items()}
    ff, uniform = "fixed-first K0=2 @0.67", "uniform 1..16"
    record.update(
        modeled=plan_run(configs[ff]).modeled_savings(),
        planned=1 - plans[ff] / plans[uniform],
        runs=[],
    )
    with shared_cache(cache), tempfile.TemporaryDirectory(dir=s.work) as tmp:
        for repeat in range(repeats):
            for name, config in configs.items():
                run_started = time.perf_counter()
                run = Path(tmp) / f"{repeat}-{name[:7]}"
                summary = Trainer(config, str(run), quiet=True).train()
                whole = time.perf_counter() - run_started
                shutil.rmtree(run)  # lm-200m's checkpoints take gigabytes each
                record["runs"].append(
                    {
                        "schedule": name,
                        "repeat": repeat,
                        "wall_s": summary["wall"],
                        "whole_s": whole,
                    }
                )
                report.row(
                    part,
                    f"{name}, repeat {repeat + 1}",
                    f"{summary['steps']} steps, {summary['wall']:.1f} s of training steps, "
                    f"{whole:.1f} s the whole run",
                )
    walls = {
        key: {
            n: statistics.median(r[key] for r in record["runs"] if r["schedule"] == n)
            for n in configs
        }
        for key in ("wall_s", "whole_s")
    }
    record["trained_s"] = sum(r["wall_s"] for r in record["runs"])
    record["measured"] = 1 - walls["wall_s"][ff] / walls["wall_s"][uniform]
    record["measured_whole"] = 1 - walls["whole_s"][ff] / walls["whole_s"][uniform]
    report.row(
        part,
        f"{ff} against {uniform}, median of {repeats}",
        f"training steps' wall-clock saved {record['measured']:.1%}, whole runs "
        f"{record['measured_whole']:.1%}; modeled FLOPs {record['modeled']:.1%}, the plan on "
        f"the measured MFU {record['planned']:.1%} (paper: 26-39% measured)",
    )
    record["elapsed_s"] = time.monotonic() - started


PART_RUNNERS: dict[str, Callable[..., None]] = {
    "figure 1": figure1,
    "language model": language_model,
    "savings": savings,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-questions-output"))
    parser.add_argument(
        "--budget", type=float, default=480.0, metavar="SECONDS", help="(default 480)"
    )
    parser.add_argument("--smoke", action="store_true", help="every part on the CPU, toy size")
    parser.add_argument("--work", type=Path, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--data", type=Path, help="a prepared pystdlib folder (default: prepare)")
    parser.add_argument("--no-compile", action="store_true", help="every run eager")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    started = time.perf_counter()
    command = "benchmarks/gpu_questions.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report = Report(args.out, command)
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        s = environment(report, args.smoke, work, not args.no_compile)
        for part in PARTS:
            extra = (args.data,) if part == "language model" else ()
            try:
                PART_RUNNERS[part](report, s, budget, *extra)
            except Exception as e:  # a GPU run goes on to its next part, and says why
                traceback.print_exc()
                report.row(part, "FAILED", f"{type(e).__name__}: {e}".replace("\n", " "))
                failed.append(part)
    report.data["failed"] = failed
    report.row(
        "total",
        "wall-clock",
        f"{time.perf_counter() - started:.0f} s of a {args.budget:.0f} s budget "
        f"({cpu_seconds():.0f} s of CPU); "
        + (f"failed: {', '.join(failed)}" if failed else "no part failed"),
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
