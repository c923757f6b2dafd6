"""The fixed-first gap to uniform training against training length, from a sweep over seeds.

    python scripts/gap_by_length.py runs/lm-code-cpu --pair ff-k2-s0.67-uniform:uniform \
        --lengths 1,0.25,0.0625 --out docs/figures/lm-code-gap-by-length
    python scripts/gap_by_length.py docs/figures/lm-code-results.json \
        --pair ff-k4-s0.67-uniform:uniform --paper 0.09 --out docs/figures/lm-code-gap-by-length-k4

For each length L the entries are A (L = 1) or A-xL and B or B-xL; the gap is A's mean serving NLL
over B's, minus 1, paired by seed, with its 95% t-interval over the seeds both finished
(fixedfirst.stats.evidence). Writes OUT.md (the table) and OUT.png (the gap against tokens, and
tokens per parameter on the top axis), and prints the table. A length whose runs are missing is
left out and named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fixedfirst.compute.memory import parameters
from fixedfirst.files.writing import save_figure
from fixedfirst.stats.evidence import paired_relative, sign
from fixedfirst.studies.sweep.spec import load_sweep


def entry(name: str, length: float) -> str:
    return name if length == 1 else f"{name}-x{length:g}"


def nll_by_seed(runs: list[dict], group: str) -> dict[int, float]:
    return {r["seed"]: r["mean_serving_nll"] for r in runs if r["group"] == group}


def gap_rows(results: dict, a: str, b: str, lengths: list[float]) -> tuple[list[dict], list[str]]:
    rows, missing = [], []
    for length in lengths:
        ours, theirs = (
            nll_by_seed(results["runs"], entry(a, length)),
            nll_by_seed(results["runs"], entry(b, length)),
        )
        if len(set(ours) & set(theirs)) < 2:
            missing.append(f"{entry(a, length)} / {entry(b, length)}")
            continue
        tokens = next(r["tokens"] for r in results["runs"] if r["group"] == entry(a, length))
        gap = paired_relative(ours, theirs)
        rows.append({"length": length, "tokens": tokens, "gap": gap, "seeds": gap.n})
    return rows, missing


def markdown(rows: list[dict], a: str, b: str, params: int, missing: list[str]) -> str:
    lines = [
        f"| tokens | tokens per parameter | seeds | {a} / {b} - 1 (mean serving NLL) "
        "| 95% interval | sign |",
        "| ---: | ---: | ---: | ---: | :---: | :---: |",
    ]
    for r in rows:
        g = r["gap"]
        lines.append(
            f"| {r['tokens']:,} | {r['tokens'] / params:.2f} | {r['seeds']} | "
            f"{100 * g.mean:+.2f}% | [{100 * g.low:+.2f}%, {100 * g.high:+.2f}%] | {sign(g)} |"
        )
    lines += ["", f"Parameters: {params:,} (every run of the study has the same model)."]
    if missing:
        lines.append("Not finished (left out): " + ", ".join(missing) + ".")
    return "\n".join(lines) + "\n"


def draw(rows: list[dict], a: str, b: str, params: int, paper: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    tokens = [r["tokens"] for r in rows]
    mean = [100 * r["gap"].mean for r in rows]
    low = [100 * (r["gap"].mean - r["gap"].low) for r in rows]
    high = [100 * (r["gap"].high - r["gap"].mean) for r in rows]
    ax.errorbar(tokens, mean, yerr=[low, high], marker="o", capsize=4, label="mean, 95% interval")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.axhline(paper, color="tab:red", ls=":", lw=1, label=f"the paper's {paper:g}%")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"{a} / {b} - 1, mean serving NLL (%)")
    top = ax.secondary_xaxis("top", functions=(lambda t: t / params, lambda p: p * params))
    top.set_xlabel("tokens per parameter")
    ax.set_title("The fixed-first gap against training length (over seeds)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "results", type=Path, help="a sweep directory, or its results.json (e.g. a committed copy)"
    )
    parser.add_argument("--config", type=Path, default=Path("configs/sweeps/lm-code-cpu.toml"))
    parser.add_argument("--pair", default="ff-k2-s0.67-uniform:uniform", help="A:B entries")
    parser.add_argument("--lengths", default="1,0.25,0.0625", help="token multiples of A and B")
    parser.add_argument("--paper", type=float, default=0.5, help="the paper's gap in %% (a line)")
    parser.add_argument("--out", type=Path, required=True, help="OUT.md and OUT.png")
    args = parser.parse_args()
    a, b = args.pair.split(":")
    lengths = [float(x) for x in args.lengths.split(",")]
    path = args.results / "results.json" if args.results.is_dir() else args.results
    results = json.loads(path.read_text())
    spec = load_sweep(args.config)
    params = parameters(spec.runs[0].config.model).total
    rows, missing = gap_rows(results, a, b, lengths)
    text = markdown(rows, a, b, params, missing)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    draw(rows, a, b, params, args.paper, args.out.with_suffix(".png"))
    print(text, end="")


if __name__ == "__main__":
    main()
