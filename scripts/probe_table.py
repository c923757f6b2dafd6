"""The table of a regime probe (a sweep under configs/probes/), with its criterion checked per run.

    python scripts/probe_table.py lm DIR/results.json --out docs/probes/lm-depth.md
    python scripts/probe_table.py bios DIR/results.json --ceiling 38.95 \
        --out docs/probes/bios-loop.md
    python scripts/probe_table.py regime DIR/results.json --out docs/probes/lm-regime.md
    python scripts/probe_table.py health DIR/results.json --out docs/probes/lm-health.md \
        --figure docs/probes/lm-health.png

`lm`: held-out NLL at serving depths 1, 2, 4, 8, 16, 32, 64 of each uniform-trained run; the
criterion (depth is used) is NLL at 16 at least 1% below depth 4 and at least 4% below depth 1.
`bios`: recalled bits per person at the same depths of each fixed K=4 run, from the sweep's task
metric; the criterion (recall runs through the loop) is recall at depth 4 at least 80% of the
ceiling and recall at depth 1 at most 50% of that at depth 4.
`regime`: pairs of runs NAME-uniform and NAME-fixed4 (configs/probes/lm-regime.toml); the regime
holds when uniform's NLL at 16 is at least 3% below its depth 4 and the fixed K = 4 model served
at depth 4 is not below uniform at depth 16. A pair whose partner has not finished says so.
`health`: each run's held-out NLL at depths 1, 4, 8, 16 and over 1..16, and its training loss
curve read for trouble: the loss around 25%, 50% and 100% of the steps (the median of the logged
steps in the tenth of the run before each), the largest spike (a logged loss over the median of
the SPIKE_WINDOW logged steps before it, minus 1) and the share of steps whose gradient norm
was clipped (over `--clip`, the probe's train.grad_clip); `--figure` draws the curves.

The sweep's results.json is copied beside the table (`--out` with .json), so that the table is
checked against the numbers it was made from (tests/test_study_configs.py); `--no-copy` where the
results are committed already under their own name (the factor study's health table is remade
from docs/figures/lm-factors-results.json by tests/test_committed_reports.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

DEPTHS = (1, 2, 4, 8, 16, 32, 64)
LM_GAIN_OVER_4 = 0.01
LM_GAIN_OVER_1 = 0.04
BIOS_CEILING_SHARE = 0.8
BIOS_SHALLOW_SHARE = 0.5
REGIME_GAIN_OVER_4 = 0.03
HEALTH_DEPTHS = (1, 4, 8, 16)
HEALTH_MARKS = (0.25, 0.5, 1.0)
SPIKE_WINDOW = 20


def _describe(run: dict[str, Any]) -> str:
    return f"{run['steps']} steps, {run['tokens']:,} tokens"


def lm_rows(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| run | training | "
        + " | ".join(f"NLL K={d}" for d in DEPTHS)
        + " | 16 vs 4 | 16 vs 1 | depth used |",
        "| --- | --- |" + " --- |" * (len(DEPTHS) + 3),
    ]
    for run in runs:
        nll = {int(d): v for d, v in run["nll_by_depth"].items()}
        over_4 = 1 - nll[16] / nll[4]
        over_1 = 1 - nll[16] / nll[1]
        used = over_4 >= LM_GAIN_OVER_4 and over_1 >= LM_GAIN_OVER_1
        cells = " | ".join(f"{nll[d]:.4f}" for d in DEPTHS)
        lines.append(
            f"| {run['name']} | {_describe(run)} | {cells} | {100 * over_4:.2f}% below | "
            f"{100 * over_1:.2f}% below | {'yes' if used else 'no'} |"
        )
    return lines


def bios_rows(runs: list[dict[str, Any]], ceiling: float) -> list[str]:
    lines = [
        "| run | training | "
        + " | ".join(f"K={d}" for d in DEPTHS)
        + " | K=4 of ceiling | K=1 of K=4 | through the loop |",
        "| --- | --- |" + " --- |" * (len(DEPTHS) + 3),
    ]
    for run in runs:
        bits = {int(d): v for d, v in run["task_scores"].items()}
        at4 = bits[4] / ceiling
        at1 = bits[1] / bits[4] if bits[4] > 0 else float("inf")
        holds = at4 >= BIOS_CEILING_SHARE and at1 <= BIOS_SHALLOW_SHARE
        cells = " | ".join(f"{bits[d]:.1f}" for d in DEPTHS)
        lines.append(
            f"| {run['name']} | {_describe(run)} | {cells} | {100 * at4:.0f}% | {100 * at1:.0f}% "
            f"| {'yes' if holds else 'no'} |"
        )
    return lines


def regime_rows(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| levers | uniform: training | uniform K=1 | K=4 | K=16 | 16 vs 4 "
        "| fixed K=4: training | fixed K=4 at 4 | fixed at 4 vs uniform at 16 | regime |",
        "| --- |" + " --- |" * 9,
    ]
    by_name = {run["name"]: run for run in runs}
    levers = dict.fromkeys(
        name.rsplit("-", 1)[0] for name in by_name if name.endswith(("-uniform", "-fixed4"))
    )
    for lever in levers:
        uniform, fixed = by_name.get(f"{lever}-uniform"), by_name.get(f"{lever}-fixed4")
        cells = ["not finished", "", "", "", ""]
        if uniform is not None:
            u = {int(d): v for d, v in uniform["nll_by_depth"].items()}
            over_4 = 1 - u[16] / u[4]
            cells = [_describe(uniform), f"{u[1]:.4f}", f"{u[4]:.4f}", f"{u[16]:.4f}"]
            cells.append(f"{100 * over_4:.2f}% below")
        more = ["not finished", "", ""]
        if fixed is not None:
            f4 = fixed["nll_by_depth"]["4"]
            more = [_describe(fixed), f"{f4:.4f}", ""]
            if uniform is not None:
                gap = f4 / u[16] - 1
                more[2] = f"{100 * abs(gap):.2f}% {'above' if gap >= 0 else 'below'}"
        if uniform is not None and fixed is not None:
            holds = over_4 >= REGIME_GAIN_OVER_4 and f4 >= u[16]
            verdict = "yes" if holds else "no"
        else:
            verdict = "cannot tell"
        lines.append(f"| {lever} | " + " | ".join([*cells, *more, verdict]) + " |")
    return lines


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def curve_health(curve: dict[str, list[float]], steps: int, clip: float) -> dict[str, Any]:
    """The loss around each mark, the largest spike (and its step) and the clipped share."""
    step, loss = curve["step"], curve["loss"]
    around = {}
    for mark in HEALTH_MARKS:
        window = [
            v for s, v in zip(step, loss, strict=True) if (mark - 0.1) * steps < s <= mark * steps
        ]
        around[mark] = _median(window) if window else None
    spike, spike_step = 0.0, None
    for i in range(SPIKE_WINDOW, len(loss)):
        rise = loss[i] / _median(loss[i - SPIKE_WINDOW : i]) - 1
        if rise > spike:
            spike, spike_step = rise, step[i]
    clipped = sum(g > clip for g in curve["grad_norm"]) / len(curve["grad_norm"])
    return {"around": around, "spike": spike, "spike_step": spike_step, "clipped": clipped}


def health_rows(runs: list[dict[str, Any]], clip: float) -> list[str]:
    marks = " | ".join(f"loss at {100 * m:.0f}%" for m in HEALTH_MARKS)
    lines = [
        "| run | training | "
        + " | ".join(f"NLL K={d}" for d in HEALTH_DEPTHS)
        + f" | mean 1..16 | {marks} | largest spike | clipped |",
        "| --- | --- |" + " --- |" * (len(HEALTH_DEPTHS) + len(HEALTH_MARKS) + 3),
    ]
    for run in runs:
        nll = {int(d): v for d, v in run["nll_by_depth"].items()}
        h = curve_health(run["loss_curve"], run["steps"], clip)
        losses = " | ".join("" if v is None else f"{v:.3f}" for v in h["around"].values())
        spike = f"+{100 * h['spike']:.0f}% at step {h['spike_step']}" if h["spike_step"] else "none"
        lines.append(
            f"| {run['name']} | {_describe(run)} | "
            + " | ".join(f"{nll[d]:.4f}" for d in HEALTH_DEPTHS)
            + f" | {run['mean_serving_nll']:.4f} | {losses} | {spike} | {100 * h['clipped']:.0f}% |"
        )
    return lines


def health_figure(runs: list[dict[str, Any]], path: Path) -> None:
    """Each run's training loss (a running median over SPIKE_WINDOW logged steps, and the raw
    points faintly) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        step, loss = run["loss_curve"]["step"], run["loss_curve"]["loss"]
        smooth = [_median(loss[max(0, i - SPIKE_WINDOW + 1) : i + 1]) for i in range(len(loss))]
        (line,) = ax.plot(step, smooth, label=run["name"], linewidth=1.4)
        ax.plot(step, loss, color=line.get_color(), alpha=0.2, linewidth=0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per byte)")
    ax.set_ylim(top=min(4.0, ax.get_ylim()[1]))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(
    kind: str, results: dict[str, Any], ceiling: float | None = None, clip: float = 1.0
) -> str:
    runs = results["runs"]
    if kind == "lm":
        body = lm_rows(runs)
        legend = (
            "NLL: held-out nats per byte at serving depth K (the sweep's final evaluation). "
            f"Depth is used when NLL at K=16 is at least {100 * LM_GAIN_OVER_4:.0f}% below K=4 "
            f"and at least {100 * LM_GAIN_OVER_1:.0f}% below K=1."
        )
    elif kind == "bios":
        if ceiling is None:
            raise ValueError("a bios probe table needs the ceiling (bits per person)")
        body = bios_rows(runs, ceiling)
        legend = (
            "Recalled bits per person at serving depth K (the sweep's task metric, every person). "
            f"Recall runs through the loop when K=4 recalls at least "
            f"{100 * BIOS_CEILING_SHARE:.0f}% of the ceiling ({ceiling:.2f} bits) and K=1 at most "
            f"{100 * BIOS_SHALLOW_SHARE:.0f}% of what K=4 recalls."
        )
    elif kind == "regime":
        body = regime_rows(runs)
        legend = (
            "NLL: held-out nats per byte at serving depth K (the sweep's final evaluation, "
            "seed 0). The regime holds when uniform's NLL at K=16 is at least "
            f"{100 * REGIME_GAIN_OVER_4:.0f}% below its K=4 and fixed K=4 served at 4 is not below "
            "uniform at 16."
        )
    elif kind == "health":
        body = health_rows(runs, clip)
        legend = (
            "NLL: held-out nats per byte at serving depth K (the sweep's final evaluation). "
            "Loss at N%: the median training loss of the logged steps in the tenth of the run "
            f"before N% of its steps. Largest spike: a logged loss over the median of the "
            f"{SPIKE_WINDOW} logged steps before it, minus 1. Clipped: the share of logged steps "
            f"whose gradient norm was above the clip ({clip:g})."
        )
    else:
        raise ValueError(f"kind must be 'lm', 'bios', 'regime' or 'health', got {kind!r}")
    return "\n".join([*body, "", legend]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("lm", "bios", "regime", "health"))
    parser.add_argument("results", type=Path, help="the probe sweep's results.json")
    parser.add_argument("--out", type=Path, required=True, help="the table (.md)")
    parser.add_argument("--ceiling", type=float, help="bios: the ceiling in bits per person")
    parser.add_argument("--clip", type=float, default=1.0, help="health: train.grad_clip")
    parser.add_argument("--figure", type=Path, help="health: the loss curves (.png)")
    parser.add_argument(
        "--no-copy", action="store_true", help="do not copy results.json beside the table"
    )
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(args.kind, results, args.ceiling, args.clip))
    if args.figure is not None:
        health_figure(results["runs"], args.figure)
    if args.no_copy:
        print(f"wrote {args.out}")
        return
    copy = args.out.with_suffix(".json")
    if not copy.exists() or not copy.samefile(args.results):  # remade from the committed copy
        shutil.copyfile(args.results, copy)
    print(f"wrote {args.out} and {copy}")


if __name__ == "__main__":
    main()
