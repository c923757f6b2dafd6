"""Downstream accuracy at several serving depths: lm-evaluation-harness once per depth.

A looped model answers at every depth, so the question is a table of task x metric x depth: one
model is loaded and served at each depth in turn, each depth a complete harness run over the same
documents. Without the network the run goes on offline (cached datasets only) and says so in one
line when a dataset is missing. docs/design.md §18 has the details, docs/reference/files.md
downstream.json.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_json_atomic, write_text_atomic

FORMAT = "fixedfirst-downstream"
VERSION = 1
METRICS = ("acc", "acc_norm")
HUB_HOST = "huggingface.co"
PROBE_TIMEOUT_S = 5.0


def hub_reachable(host: str = HUB_HOST, timeout: float = PROBE_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def go_offline() -> None:
    """Make the hub libraries fail at once instead of retrying a connection that cannot work."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def task_manager(tasks: list[str], include_path: str | None):
    """The harness's TaskManager, with every task in `tasks` known (else a UserError).

    Indexing the harness's own task files takes ~20 s on this machine; tasks that are all
    found under `include_path` are served by an index of that directory alone."""
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        if not Path(include_path).is_dir():
            raise UserError(f"--include-path {include_path}: no such directory")
        local = TaskManager(include_path=include_path, include_defaults=False)
        if set(tasks) <= set(local.all_tasks):
            return local
    manager = TaskManager(include_path=include_path)
    unknown = [t for t in tasks if t not in set(manager.all_tasks)]
    if unknown:
        raise UserError(
            f"unknown task {unknown[0]!r} for lm-evaluation-harness "
            "(list them with `lm-eval ls tasks`; local tasks need --include-path DIR)"
        )
    return manager


def _metric(task_result: dict[str, Any], name: str) -> float | None:
    value = task_result.get(f"{name},none")
    return float(value) if isinstance(value, (int, float)) else None


def evaluate_depths(
    lm,
    tasks: list[str],
    depths: list[int],
    manager,
    limit: int | None = None,
    network: bool = True,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{task: {depth: {acc, acc_stderr, acc_norm, acc_norm_stderr, samples}}}."""
    import lm_eval

    results: dict[str, dict[str, dict[str, Any]]] = {task: {} for task in tasks}
    for depth in depths:
        lm.set_depth(depth)
        try:
            out = lm_eval.simple_evaluate(
                model=lm, tasks=tasks, task_manager=manager, limit=limit, log_samples=False
            )
        except UserError:
            raise
        except Exception as e:  # the harness and datasets raise many kinds; say which one
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if not network:
                raise UserError(
                    f"the tasks' datasets could not be loaded and {HUB_HOST} is unreachable: "
                    f"downstream evaluation needs the network to download them ({first})"
                ) from None
            raise UserError(f"lm-evaluation-harness failed: {first}") from None
        for task in tasks:
            task_result = out["results"].get(task, {})
            entry: dict[str, Any] = {
                "samples": out.get("n-samples", {}).get(task, {}).get("effective")
            }
            for metric in METRICS:
                entry[metric] = _metric(task_result, metric)
                entry[f"{metric}_stderr"] = _metric(task_result, f"{metric}_stderr")
            results[task][str(depth)] = entry
    return results


def markdown_table(report: dict[str, Any]) -> str:
    depths = report["depths"]
    lines = [
        f"Downstream accuracy of {report['source']} (lm-evaluation-harness "
        f"{report['lm_eval_version']}"
        + (f", first {report['limit']} documents per task" if report["limit"] else "")
        + ")",
        "",
        "| task | metric | " + " | ".join(f"K={d}" for d in depths) + " |",
        "| --- | --- | " + " | ".join("---" for _ in depths) + " |",
    ]
    for task, by_depth in report["results"].items():
        for metric in METRICS:
            cells = []
            for d in depths:
                value = by_depth[str(d)][metric]
                cells.append("n/a" if value is None else f"{value:.4f}")
            lines.append(f"| {task} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "downstream.json", out / "downstream.md"
    write_json_atomic(json_path, report)
    write_text_atomic(md_path, markdown_table(report))
    return json_path, md_path
