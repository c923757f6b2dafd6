"""The scalars TensorBoard and W&B receive from a metrics.jsonl record, by tag.

    train records  train/loss, train/lr, train/grad_norm, train/depth, train/tok_per_s, train/mfu,
                   progress/tokens, progress/flops (cumulative modeled training FLOPs),
                   progress/wall (training wall-clock, seconds)
    eval records   eval/nll_depth_K for every serving depth K, eval/mean_serving_nll
    auto switch    switch/gain (each depth-gap probe), switch/decrease and switch/bound (each
                   check of the rule with enough points; docs/design.md §14)

The same names in both, so a curve is found under the same tag wherever one looks. An evaluation
happens at a step that usually also has a training record, so the progress/ scalars come from
training records only (a tag gets one value per step).
"""

from __future__ import annotations

from typing import Any


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The scalars of one metrics.jsonl record, by tag."""
    out: dict[str, float] = {}
    if record.get("kind") == "train":
        for key in ("loss", "lr", "grad_norm", "depth", "tok_per_s", "mfu"):
            out[f"train/{key}"] = float(record[key])
        out["progress/tokens"] = float(record["tokens"])
        out["progress/flops"] = float(record["flops"])
        out["progress/wall"] = float(record["wall"])
    elif record.get("kind") == "eval":
        for depth, nll in record["nll_by_depth"].items():
            out[f"eval/nll_depth_{depth}"] = float(nll)
        if "mean_serving_nll" in record:
            out["eval/mean_serving_nll"] = float(record["mean_serving_nll"])
        for depth, nll in record.get("nll_by_depth_fp32", {}).items():
            out[f"eval/nll_fp32_depth_{depth}"] = float(nll)
    elif record.get("kind") == "switch_probe":
        out["switch/gain"] = float(record["gain"])
    elif record.get("kind") == "switch_check" and record["decrease"] is not None:
        out["switch/decrease"] = float(record["decrease"])
        out["switch/bound"] = float(record["bound"])
    return out
