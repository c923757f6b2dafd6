"""`fixedfirst ablation`: each switch flipped once from the task preset, trained at fixed depth,
scored by the task's metric at 1, K, 2K, 4K and 16K."""

from __future__ import annotations

import json

import pytest

from fixedfirst.cli.main import main
from fixedfirst.model import LoopedTransformer
from fixedfirst.studies.ablation.experiment import SWITCHES, load_ablation
from fixedfirst.studies.ablation.report import report_markdown
from tests.report_checks import assert_report_remade


def test_variants_flip_one_switch_each_from_the_preset():
    ablation = load_ablation("chains", "smoke", [], 2, [0])
    arms = ablation.arms()
    assert set(arms) == {"preset", "state_init=normal", "injection=concat",
                         "norm=sandwich", "coda_norm=false"}  # fmt: skip
    preset_model = ablation.run_config("preset", 0).model
    for name in arms:
        model = ablation.run_config(name, 0).model
        changed = [s for s in SWITCHES if getattr(model, s) != getattr(preset_model, s)]
        assert changed == ([] if name == "preset" else [name.split("=")[0]])
        if name != "preset":
            switch, value = name.split("=")
            assert str(getattr(model, switch)).lower() == value
    assert ablation.experiment.depths == [1, 2, 4, 8, 32]
    assert ablation.run_config("preset", 0).schedule.depth == 2


def test_without_the_coda_norm_the_state_reaches_the_coda_raw():
    config = load_ablation("chains", "smoke", [], 2, [0]).run_config("coda_norm=false", 0)
    model = LoopedTransformer(config.model)
    assert not any("core_norm" in name for name, _ in model.named_parameters())


def test_ablation_end_to_end_on_the_chains_smoke_preset(tmp_path, capsys):
    out = tmp_path / "ablation"
    args = ["ablation", "--task", "chains", "--preset", "smoke", "--depth", "2", "--out", str(out)]
    with pytest.raises(SystemExit) as e:  # side by side: the runs and their scores in workers
        main([*args, "--set", "experiment.flops=1e9", "--jobs", "2"])
    assert e.value.code == 0
    results = json.loads((out / "results.json").read_text())
    assert len(results["runs"]) == 5 and results["depths"] == [1, 2, 4, 8, 32]
    report = (out / "report.md").read_text()
    for run in results["runs"].values():
        assert set(run["scores"]) == {"1", "2", "4", "8", "32"}
        assert all(0.0 <= v <= 1.0 for v in run["scores"].values())
        cells = " | ".join(f"{run['scores'][d]:.3g}" for d in ("1", "2", "4", "8", "32"))
        assert f"| {run['variant']} |" in report and cells in report
    assert "coda_norm=false" in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text())["runs"] == {
        name: {"variant": run["variant"], "scores": run["scores"]}
        for name, run in results["runs"].items()
    }  # results.json without the steps and FLOPs, which the report does not read
    assert_report_remade(out, report_markdown, report_markdown(results), tmp_path)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--task", "fortunes"], "--task 'fortunes': choose one of bios, chains"),
        (["--task", "chains", "--depth", "0"], "--depth must be in 1..64"),
        (["--task", "chains", "--seeds", "a"], "--seeds 'a': expected comma-separated"),
    ],
)
def test_bad_ablation_input_is_one_line(tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as e:
        main(["ablation", *args, "--preset", "smoke", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_each_variant_is_compared_with_the_preset_seed_by_seed():
    """At K=64 the preset scores 0.98 and 0.97 in seeds 0 and 1, the variant 0.86 and 0.91:
    differences -0.12 and -0.06, mean -0.09, sd 0.0424, t(1) = 12.706 (printed tables): the
    95% interval is -0.09 -+ 0.381, which contains zero."""
    from fixedfirst.studies.ablation.report import findings

    def run(variant, seed, at_64):
        return {"variant": variant, "scores": {"4": 0.99, "64": at_64}}

    results = {
        "training_depth": 4,
        "depths": [4, 64],
        "runs": {
            "preset-seed0": run("preset", 0, 0.98),
            "preset-seed1": run("preset", 1, 0.97),
            "coda_norm=false-seed0": run("coda_norm=false", 0, 0.86),
            "coda_norm=false-seed1": run("coda_norm=false", 1, 0.91),
        },
    }
    half = 12.706 * 0.0424264 / 2**0.5
    assert findings(results)[-1] == (
        "Same-seed difference from the preset at K=64, mean [95% t-interval over the 2 seeds]: "
        f"coda_norm=false -0.090 [{-0.09 - half:+.3f}, {-0.09 + half:+.3f}] (cannot tell)."
    )
