"""The command line: help for every command, and the compute report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixedfirst.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"] if command is None else [command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: fixedfirst" in out
    if command is None:
        assert all(name in out for name in COMMANDS)


def test_compute_json(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compute", str(ROOT / "configs" / "paper-200m.toml"), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert {"schedule_flops", "uniform_flops", "modeled_savings"} <= set(report)
    assert report["modeled_savings"] == pytest.approx(
        1 - report["schedule_flops"] / report["uniform_flops"]
    )
    assert sum(s["steps"] for s in report["stages"]) == report["steps"]


def test_config_reference_lists_every_key(capsys):
    from dataclasses import fields

    from fixedfirst.config import SECTIONS

    with pytest.raises(SystemExit):
        main(["config-reference", "--markdown"])
    out = capsys.readouterr().out
    for section in SECTIONS:
        for f in fields(section):
            if f.metadata.get("table"):  # [data.KIND]: listed per kind below
                continue
            assert f"`{f.name}`" in out
    from fixedfirst.tasks.bios.world import BiosOptions

    assert "**[data.bios]**" in out
    for f in fields(BiosOptions):
        assert f"`{f.name}`" in out
    from fixedfirst.studies.bios.analysis import BIOS_CLAIMS
    from fixedfirst.studies.bios.experiment import ExperimentConfig as Bios
    from fixedfirst.studies.chains.experiment import ExperimentConfig as Chains
    from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS
    from fixedfirst.studies.sweep.claims import CLAIMS
    from fixedfirst.studies.sweep.factors import GapSpec
    from fixedfirst.studies.sweep.settings import SweepSettings

    for title, keys in (
        ("[experiment] (bios)", [f.name for f in fields(Bios)]),
        ("[[experiment.primary]] (bios)", list(BIOS_CLAIMS.keys)),
        ("[experiment] (chains)", [f.name for f in fields(Chains)]),
        ("[[experiment.primary]] (chains)", list(BAND_CLAIMS.keys)),
        ("[sweep] (a sweep file)", [f.name for f in fields(SweepSettings)]),
        ("[[claims]] (a sweep file)", list(CLAIMS.keys)),
        ("[[gaps]] (a sweep file)", [f.name for f in fields(GapSpec)]),
    ):
        section = out[out.index(f"**{title}**") :]
        section = section[: section.index("\n\n", section.index("| --- |"))]
        assert [f"`{key}`" in section for key in keys] == [True] * len(keys)
