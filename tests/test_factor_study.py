"""A factor study end to end on a tiny corpus: one shared held-out set for every run (its
checksum, fp32, blocks), the entries a gap needs trained again at every level, and the factor
table's gaps and changes recomputed here from the runs' own evaluation files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.studies.sweep import load_sweep
from fixedfirst.studies.sweep.factors import factor_table, factors_markdown
from fixedfirst.studies.sweep.results import ROW_FROM
from tests.test_sweep import BASE, assert_one_line_error, corpus, run_cli  # noqa: F401

STUDY = """
[sweep]
seeds = [0, 1]
heldout = "shared"
heldout_rows = 16
heldout_seed = 5
heldout_blocks = 4
eval_depths = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32]

[[runs]]
name = "uniform"
schedule.kind = "uniform"

[[runs]]
name = "ff"
schedule.k0 = 2

[[runs]]
name = "uniform-matched"
schedule.kind = "uniform"
flops_of = "ff"

[[runs]]
name = "fixed-4"
schedule.kind = "fixed"
schedule.depth = 4

[[gaps]]
name = "ff vs uniform"
a = "ff"
b = "uniform"

[[gaps]]
name = "ff vs matched"
a = "ff"
b = "uniform-matched"
primary = false

[[claims]]
text = "ff within 50% of uniform"
a = "ff"
b = "uniform"
measure = "relative"
claim = "below"
bound = 0.5

[[claims]]
text = "fixed-4 at depth 16 above uniform"
a = "fixed-4"
b = "uniform"
metric = "depth:16"
measure = "difference"
claim = "above"
bound = 0.0
primary = false

[[factors]]
name = "lr"
title = "learning-rate schedule"
base = "cosine"

[[factors.levels]]
name = "wsd"
train.lr_schedule = "wsd"
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory, corpus):  # noqa: F811
    root = tmp_path_factory.mktemp("factor-study")
    path = root / "study.toml"
    path.write_text(BASE.format(data=corpus).replace("batch_size = 4", "batch_size = 2") + STUDY)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, study):
    """The study trained whole, once: DIR (its results.json, its runs)."""
    out = tmp_path_factory.mktemp("trained") / "out"
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(study), "--out", str(out), "--jobs", "1", "--quiet"])
    assert info.value.code == 0
    return out


def test_the_levels_train_the_entries_the_gaps_need(study):
    spec = load_sweep(study)
    entries = list(dict.fromkeys(spec.groups.values()))
    assert entries == [
        "uniform",
        "ff",
        "uniform-matched",
        "fixed-4",
        *(f"wsd-{e}" for e in ("uniform", "ff", "uniform-matched")),
    ]
    wsd = spec.run("wsd-ff-seed1").config
    assert wsd.train.lr_schedule == "wsd" and wsd.schedule.k0 == 2 and wsd.train.seed == 1
    assert spec.run("ff-seed1").config.train.lr_schedule == "cosine"
    assert spec.flops_of["wsd-uniform-matched-seed0"] == "wsd-ff-seed0"


def test_a_gap_at_the_base_only_trains_nothing_again_and_has_no_changes(tmp_path, study):
    text = study.read_text().replace("primary = false\n", "primary = false\nat_levels = false\n", 1)
    path = tmp_path / "study.toml"
    path.write_text(text)
    spec = load_sweep(path)
    entries = list(dict.fromkeys(spec.groups.values()))
    assert entries == ["uniform", "ff", "uniform-matched", "fixed-4", "wsd-uniform", "wsd-ff"]
    # Made-up NLLs: the gap measured at the levels keeps its wsd row; the other has none, so
    # Holm's family is the one change.
    nll = {"uniform": 2.0, "ff": 2.2, "uniform-matched": 2.4, "wsd-uniform": 2.0, "wsd-ff": 2.1}
    rows = [
        {"group": g, "seed": s, "mean_serving_nll": v + 0.01 * s}
        for g, v in nll.items()
        for s in (0, 1, 2)
    ]
    table = factor_table(rows, spec.gaps, spec.factors)
    assert [(r["name"], r["level"]) for r in table["rows"]] == [
        ("ff vs uniform", None),
        ("ff vs uniform", "wsd"),
        ("ff vs matched", None),
    ]
    assert table["rows"][2]["gap"]["mean"] == pytest.approx(
        np.mean([(2.2 + 0.01 * s) / (2.4 + 0.01 * s) - 1 for s in (0, 1, 2)])
    )
    assert "all 1 of them by Holm" in factors_markdown(table)


def test_a_factor_study_shares_one_held_out_set_and_tables_its_gaps(study, trained):
    out = trained
    results = json.loads((out / "results.json").read_text())
    rows = {r["name"]: r for r in results["runs"]}
    assert len(rows) == 14
    # One held-out set: every run's rows have the same checksum, 16 rows whatever the batch size.
    heldout = results["heldout"]
    assert heldout["rows"] == "shared" and heldout["count"] == 16 and heldout["blocks"] == 4
    assert {r["validation_sha256"] for r in rows.values()} == {heldout["sha256"]}
    assert {r["eval_precision"] for r in rows.values()} == {"fp32"}
    evaluation = json.loads(next((out / "runs" / "ff-seed0").glob("eval-step-*.json")).read_text())
    assert evaluation["sequences"] == 16 and evaluation["validation_seed"] == 5
    assert evaluation["depths"] == [*range(1, 17), 32] and results["eval_depths"][-1] == 32
    # The blocks are the means of the run's own row NLLs, four rows each.
    for depth in ("1", "16"):
        per_row = np.array(evaluation["row_nll"][depth])
        assert rows["ff-seed0"]["heldout_blocks"][depth] == pytest.approx(
            per_row.reshape(4, 4).mean(axis=1).tolist(), abs=1e-6
        )
    curve = rows["ff-seed0"]["loss_curve"]
    assert curve["step"][:2] == [1, 2] and len(curve["loss"]) == len(curve["step"])

    # The factor table: the base gap of seed s is ff/uniform - 1 of the whole set's mean serving
    # NLL; its mean over the two seeds is what factors.md gives.
    table = results["factors"]
    first = table["rows"][0]
    assert first["name"] == "ff vs uniform" and first["factor"] is None
    by_hand = np.mean(
        [
            rows[f"ff-seed{s}"]["mean_serving_nll"] / rows[f"uniform-seed{s}"]["mean_serving_nll"]
            - 1
            for s in (0, 1)
        ]
    )
    assert first["gap"]["mean"] == pytest.approx(by_hand, abs=1e-6)  # blocks of rounded rows
    wsd = next(r for r in table["rows"] if r["level"] == "wsd" and r["name"] == "ff vs uniform")
    wsd_hand = np.mean(
        [
            rows[f"wsd-ff-seed{s}"]["mean_serving_nll"]
            / rows[f"wsd-uniform-seed{s}"]["mean_serving_nll"]
            - 1
            for s in (0, 1)
        ]
    )
    assert wsd["change"]["mean"] == pytest.approx(wsd_hand - by_hand, abs=1e-6)
    assert wsd["change"]["verdict"] in ("higher", "lower", "cannot tell")
    # A claim on the same pair is the same quantity, with the same interval over seeds and blocks.
    claim, exploratory = results["claims"]
    assert claim["covers"] == "seeds and held-out blocks"
    assert claim["family"] == "primary, Holm over 1"
    assert (claim["mean"], claim["low"], claim["high"]) == pytest.approx(
        (first["gap"]["mean"], first["gap"]["low"], first["gap"]["high"])
    )
    assert exploratory["family"] == "exploratory, Holm over 1"
    assert exploratory["covers"] == "seeds and held-out blocks"
    markdown = (out / "factors.md").read_text()
    assert markdown == factors_markdown(factor_table(results["runs"], *_specs(study)))
    assert "learning-rate schedule, cosine -> wsd" in markdown


def test_rows_from_an_earlier_results_file_stand_in_for_runs_not_in_dir(
    tmp_path, capsys, study, trained
):
    # A later invocation holds only the level's runs; the base's come from the earlier file.
    out = tmp_path / "out"
    for run in (trained / "runs").glob("wsd-*"):
        shutil.copytree(run, out / "runs" / run.name)
    earlier = trained / "results.json"
    only = "wsd-uniform,wsd-ff,wsd-uniform-matched"
    code, printed, err = run_cli(
        capsys, "sweep", study, "--out", out, "--jobs", 1, "--only", only, "--rows-from", earlier
    )
    assert code == 0, err
    assert "trained 0 run(s)" in printed and "8 run(s) not in" in printed
    before, again = (json.loads(p.read_text()) for p in (earlier, out / "results.json"))
    assert [r["name"] for r in again["runs"]] == [r["name"] for r in before["runs"]]
    for old, new in zip(before["runs"], again["runs"], strict=True):
        assert new.get(ROW_FROM) == (None if old["name"].startswith("wsd-") else str(earlier))
        for key in ("mean_serving_nll", "nll_by_depth", "heldout_blocks", "modeled_flops"):
            assert new[key] == old[key], (old["name"], key)
    for key in ("factors", "claims", "groups", "heldout"):
        assert again[key] == before[key], key
    table = (out / "table.md").read_text()
    adopted = [r["name"] for r in before["runs"] if not r["name"].startswith("wsd-")]
    assert f"Read from {earlier} (--rows-from: trained before, not in this directory): " in table
    assert ", ".join(adopted) + "." in table and "Not finished" not in table
    assert not (out / "runs" / "ff-seed0").exists()


def tampered(row: dict, case: str) -> None:
    if case == "seed":
        row["seed"] = 7
    elif case == "modeled_flops":
        row["modeled_flops"] *= 1.01
    elif case == "precision":
        row["eval_precision"] = "bf16"
    elif case == "rows":
        row["validation_sha256"] = "0" * 64


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("seed", "its seed is 7, the sweep plans 1"),
        ("modeled_flops", "its modeled_flops is"),
        ("precision", "scored in bf16, the sweep scores in fp32"),
        ("rows", "other held-out rows than the other runs"),
        ("not results", "not a sweep's results.json"),
        ("per-seed rows", 'set [sweep] heldout = "shared"'),
    ],
)
def test_rows_that_are_not_this_sweeps_runs_are_refused_before_training(
    tmp_path, capsys, study, trained, case, fragment
):
    document = json.loads((trained / "results.json").read_text())
    tampered(document["runs"][1], case)  # uniform-seed1
    if case == "not results":
        document["format"] = "fixedfirst-chains-report"
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(document))
    sweep = study
    if case == "per-seed rows":
        sweep = tmp_path / "per-seed.toml"
        sweep.write_text(study.read_text().replace('heldout = "shared"\n', ""))
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out, "--rows-from", earlier)
    assert_one_line_error(code, err, "sweep", f"--rows-from {earlier}", fragment)
    assert not out.exists()


def test_an_entry_or_a_factor_trains_only_the_seeds_it_names(tmp_path, study):
    text = (
        study.read_text()
        .replace("seeds = [0, 1]", "seeds = [0, 1, 2]")
        .replace('name = "fixed-4"\n', 'name = "fixed-4"\nseeds = [2, 0]\n')
        .replace('base = "cosine"\n', 'base = "cosine"\nseeds = [1, 2]\n')
    )
    path = tmp_path / "study.toml"
    path.write_text(text)
    spec = load_sweep(path)
    by_entry: dict[str, list[int]] = {}
    for run in spec.runs:
        by_entry.setdefault(spec.groups[run.name], []).append(run.config.train.seed)
    assert by_entry == {
        "uniform": [0, 1, 2],
        "ff": [0, 1, 2],
        "uniform-matched": [0, 1, 2],
        "fixed-4": [0, 2],
        "wsd-uniform": [1, 2],
        "wsd-ff": [1, 2],
        "wsd-uniform-matched": [1, 2],
    }
    assert spec.flops_of["wsd-uniform-matched-seed1"] == "wsd-ff-seed1"
    assert spec.select(["fixed-4"]) == [spec.run("fixed-4-seed0"), spec.run("fixed-4-seed2")]


def _specs(study):
    spec = load_sweep(study)
    return spec.gaps, spec.factors


BAD = {
    "shared without rows": (
        STUDY.replace("heldout_rows = 16\n", ""),
        ["sweep.heldout_rows", 'heldout = "shared"'],
    ),
    "blocks that do not divide": (
        STUDY.replace("heldout_blocks = 4", "heldout_blocks = 5"),
        ["sweep.heldout_blocks", "equal blocks"],
    ),
    "a gap of no entry": (
        STUDY.replace('a = "ff"\nb = "uniform"\n', 'a = "ff2"\nb = "uniform"\n'),
        ["gaps[0]: a = 'ff2' is not a [[runs]] entry"],
    ),
    "a factor without levels": (
        STUDY[: STUDY.index("[[factors.levels]]")],
        ["factors[0]: add its levels as [[factors.levels]] tables"],
    ),
    "an entry's seed the sweep does not have": (
        STUDY.replace('name = "fixed-4"\n', 'name = "fixed-4"\nseeds = [0, 3]\n'),
        ['run "fixed-4": seeds = [0, 3] must be distinct seeds of [sweep] seeds = [0, 1]'],
    ),
    "a compute match without its run's seed": (
        STUDY.replace('name = "ff"\n', 'name = "ff"\nseeds = [1]\n'),
        ["run \"uniform-matched\": trains seed 0, but flops_of = 'ff' does not"],
    ),
    "an unknown gap key": (
        STUDY.replace('name = "ff vs uniform"', 'name = "ff vs uniform"\nsign = 1'),
        ["gaps[0]: unknown key gaps.sign"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_factor_studies_are_one_line_errors(tmp_path, capsys, corpus, case):  # noqa: F811
    text, fragments = BAD[case]
    path = tmp_path / "study.toml"
    path.write_text(BASE.format(data=corpus) + text)
    code, _, err = run_cli(capsys, "sweep", path, "--out", tmp_path / "out")
    assert_one_line_error(code, err, "sweep", *fragments)
    assert not (tmp_path / "out").exists()
