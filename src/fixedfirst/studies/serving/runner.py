"""`fixedfirst serving-economics`: the exit frontier of every finished run of the configured
studies, then the comparison across schedules; a `Study` of the one flow (`kit.conduct`) that
trains nothing.

Each run's frontier is written to OUT/frontiers/STUDY/RUN/ (frontier.json, .md, .png) and reused
when the command runs again on the same weights with the same settings, so the study resumes and
takes in runs that finished since; runs not finished yet are listed, not waited for. The run
directories are only read: a run still training is not touched. OUT/report.json holds what the
report is made from (each run's summary and the config's study, arms and comparisons), and
OUT/report.md and OUT/report.png are made from it (`report.py`, `figure.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fixedfirst.files.paths import shown
from fixedfirst.files.writing import write_text_atomic
from fixedfirst.runs.directory import RunDir
from fixedfirst.studies.kit.conduct import Study
from fixedfirst.studies.kit.report_files import numbers_json, write_numbers_and_report
from fixedfirst.studies.kit.runs import PlannedRun, RunOutcome, finished_summary
from fixedfirst.studies.kit.workers import Job, plan_workers, run_jobs
from fixedfirst.studies.serving.comparison import run_summary
from fixedfirst.studies.serving.frontier import (
    FrontierSettings,
    measure_frontier,
    open_subject,
    reusable,
)
from fixedfirst.studies.serving.frontier_figure import plot_frontier
from fixedfirst.studies.serving.frontier_report import frontier_markdown
from fixedfirst.studies.serving.settings import COMPARISONS, PRIMARY, EconomicsConfig

FORMAT = "fixedfirst-serving-economics"
VERSION = 1


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "study"


def frontier_of(run: Path, settings: FrontierSettings, out: Path, quiet: bool) -> dict[str, Any]:
    """The run's frontier document: the one in `out` when it measured these weights with these
    settings, else measured now and written there."""
    subject = open_subject(run, settings)
    try:
        saved = json.loads((out / "frontier.json").read_text())
    except (OSError, ValueError):
        saved = None
    if saved is not None and reusable(saved, subject, settings):
        return saved
    document = measure_frontier(subject, settings, quiet)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "frontier.json", numbers_json(document) + "\n")
    write_text_atomic(out / "frontier.md", frontier_markdown(document))
    plot_frontier(document, out / "frontier.png")
    return document


@dataclass
class EconomicsStudy(Study):
    """Serving economics as a study that trains nothing: every finished run of the configured
    studies measured (its frontier, side by side in `jobs` processes), then compared."""

    name = "serving-economics"
    evaluated = "frontiers"
    collecting = None
    results_file = None

    config: EconomicsConfig
    out: Path
    jobs: int = 1
    """Worker processes measuring frontiers side by side (1: in this process, one by one)."""

    def runs(self) -> list[PlannedRun]:
        return []

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        return []

    def collect(self, outcomes: list[RunOutcome], quiet: bool) -> dict[str, Any]:
        """report.json's numbers: every finished run's summary, and which runs were not there."""
        config, out = self.config, self.out
        found: list[tuple[str, str, int, Path, Path]] = []  # study, arm, seed, run, its frontier
        missing: list[str] = []
        for study in config.studies:
            for arm in study.arms:
                for seed in study.seeds:
                    path = study.run_path(arm, seed)
                    if finished_summary(RunDir(path)) is None:
                        missing.append(str(path))
                        continue
                    where = out / "frontiers" / slug(study.name) / path.name
                    found.append((study.name, arm, seed, path, where))
        documents: dict[Path, dict[str, Any]] = {}
        workers, threads = plan_workers(self.jobs, len(found), "cpu")
        if workers == 1:
            for *_, path, where in found:
                if not quiet:
                    print(f"frontier of {shown(path)}", flush=True)
                documents[where] = frontier_of(path, config.frontier, where, quiet)
        else:
            label = {where: str(where.relative_to(out)) for *_, where in found}
            work = [
                Job(label[where], frontier_of, (path, config.frontier, where, True))
                for *_, path, where in found
            ]
            results = run_jobs(work, workers, threads, quiet=quiet)
            documents = {where: results[label[where]] for where in label}
        runs: dict[str, dict[str, Any]] = {study.name: {} for study in config.studies}
        for name, arm, seed, path, where in found:
            runs[name][path.name] = run_summary(documents[where], arm, seed)
        return {
            "format": FORMAT,
            "version": VERSION,
            "config": config.path,
            "frontier": asdict(config.frontier),
            "studies": [
                {"name": s.name, "directory": s.directory, "seeds": s.seeds, "arms": s.arms}
                for s in config.studies
            ],
            "comparisons": [COMPARISONS.write(c) for c in config.comparisons],
            "primary": [PRIMARY.write(p) for p in config.primary],
            "runs": runs,
            "missing": missing,
        }

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        """OUT/report.json (the results), OUT/report.md and OUT/report.png made from it."""
        from fixedfirst.studies.serving.figure import plot_economics
        from fixedfirst.studies.serving.report import report_markdown

        write_numbers_and_report(out, results, report_markdown)
        plot_economics(json.loads((out / "report.json").read_text()), out / "report.png")
        return [out / "report.json", out / "report.md", out / "report.png"]
