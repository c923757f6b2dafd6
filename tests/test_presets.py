"""The shipped language-model configurations: the GPU presets and the sweeps load, validate and
have the shapes, costs and runs they promise. Nothing here trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from fixedfirst.compute.plan import plan_run
from fixedfirst.config import load_config
from fixedfirst.studies.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

# The paper's modeled savings (paper-summary.txt), which the GPU shapes should land near.
PAPER_SAVINGS = {(2, 0.67): 0.453, (2, 0.8): 0.543, (4, 0.67): 0.313}


def compute_report(capsys, path: Path, *overrides: str) -> dict:
    args = ["compute", str(path), "--json"]
    for override in overrides:
        args += ["--set", override]
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("name", "low", "high"), [("lm-200m", 150e6, 250e6), ("lm-1b", 0.8e9, 1.2e9)]
)
def test_gpu_preset_loads_and_has_paper_scale(capsys, name, low, high):
    path = CONFIGS / f"{name}.toml"
    config = load_config(path)
    assert config.model.vocab_size == 32768
    assert config.train.precision == "bf16" and config.train.compile
    assert config.train.seq_len <= config.model.max_seq_len
    assert config.data.kind == "tokens"
    report = compute_report(capsys, path)
    assert low < report["parameters"]["total"] < high
    assert report["modeled_savings"] == pytest.approx(
        1 - report["schedule_flops"] / report["uniform_flops"]
    )
    for (k0, switch), paper in PAPER_SAVINGS.items():
        variant = load_config(path, [f"schedule.k0={k0}", f"schedule.switch={switch}"])
        assert plan_run(variant).modeled_savings() == pytest.approx(paper, abs=0.01), (k0, switch)


def test_cpu_sweep_has_the_issues_runs():
    spec = load_sweep(CONFIGS / "sweeps" / "lm-cpu.toml")
    schedules = {r.name: r.config.schedule for r in spec.runs}
    assert len(spec.runs) == 15
    reference = spec.run(spec.reference).config
    assert schedules[spec.reference].kind == "uniform" and reference.train.flops is None
    fixed_first = {
        (s.k0, s.switch, s.finish) for s in schedules.values() if s.kind == "fixed-first"
    }
    assert fixed_first == {
        (k0, switch, finish)
        for k0 in (1, 2, 4)
        for switch in (0.67, 0.8)
        for finish in ("uniform", "poisson-lognormal")
    }
    progressive = [r for r in spec.runs if r.config.schedule.kind == "progressive"]
    assert len(progressive) == 1
    assert plan_run(progressive[0].config).tokens == plan_run(reference).tokens
    (matched, target), *_ = spec.flops_of.items()
    assert schedules[matched].kind == "uniform"
    assert (schedules[target].k0, schedules[target].switch) == (4, 0.67)
    assert spec.run(matched).config.train.flops == plan_run(spec.run(target).config).flops
    for r in spec.runs:
        assert r.config.eval.every > 0  # data.path is relative to the sweep file:
        assert Path(r.config.data.path) == ROOT / "data" / "fortunes-byte"
    figure3 = schedules[spec.figure3]
    assert (figure3.k0, figure3.switch, figure3.finish) == (2, 0.67, "uniform")


@pytest.mark.parametrize("name", ["lm-200m", "lm-1b"])
def test_gpu_sweeps_are_the_cpu_runs_on_the_presets(name):
    cpu = load_sweep(CONFIGS / "sweeps" / "lm-cpu.toml")
    gpu = load_sweep(CONFIGS / "sweeps" / f"{name}.toml")
    assert [r.name for r in gpu.runs] == [r.name for r in cpu.runs]
    preset = load_config(CONFIGS / f"{name}.toml")
    for run in gpu.runs:
        assert run.config.model == preset.model
        assert run.config.train.precision == "bf16"


def test_cpu_run_preset_is_the_sweeps_fixed_first_run_with_tensorboard():
    """configs/fortunes-cpu.toml (the README's logged run) trains what the sweep's run does."""
    preset = load_config(CONFIGS / "fortunes-cpu.toml")
    run = load_sweep(CONFIGS / "sweeps" / "lm-cpu.toml").run("ff-k2-s0.67-uniform").config
    assert preset.train.log_to == ["tensorboard"]
    preset.train.log_to = []
    assert preset.to_dict() == run.to_dict()


def test_chains_cpu_config_is_the_chains_experiments_fixed_first_run():
    """configs/chains-cpu.toml (the serving benchmark's chains run) trains what `fixedfirst
    chains` trains as fixed-first-4-0.8-seed0."""
    from fixedfirst.data.registry import resolve_data
    from fixedfirst.studies.chains.experiment import load_preset

    config = resolve_data(load_config(CONFIGS / "chains-cpu.toml"))
    run = resolve_data(load_preset("default").run_config("fixed-first-4-0.8", 0))
    assert config.to_dict() == run.to_dict()


@pytest.mark.parametrize("task", ["cpu", "chains"])
def test_switch_studies_have_the_issues_arms(task):
    """Issue 18: fixed fractions 0.5, 0.67, 0.8, 0.9 and both auto rules at K0 = 2 and 4, one
    token budget, seeds 0 and 1, one thread per run."""
    spec = load_sweep(CONFIGS / "sweeps" / f"auto-switch-{task}.toml")
    arms = {
        (s.k0, s.switch if not s.auto_switch else r.config.switch.rule)
        for r in spec.runs
        for s in [r.config.schedule]
    }
    assert arms == {(k0, a) for k0 in (2, 4) for a in (0.5, 0.67, 0.8, 0.9, "plateau", "depth-gap")}
    assert len(spec.runs) == 24 and {r.config.train.seed for r in spec.runs} == {0, 1}
    assert len({plan_run(r.config).tokens for r in spec.runs}) == 1
    assert all(r.config.train.threads == 1 for r in spec.runs) and spec.switch_study
    assert spec.metric == ("task" if task == "chains" else "nll")


def test_the_chains_switch_study_trains_the_chains_default_preset():
    from fixedfirst.studies.chains.experiment import load_preset

    preset = load_preset("default").run_config("fixed-first-4-0.8", 0)
    spec = load_sweep(CONFIGS / "sweeps" / "auto-switch-chains.toml")
    study = next(r.config for r in spec.runs if r.name == "k4-s0.8-seed0")
    assert study.model == preset.model and study.data == preset.data
    for key in ("seq_len", "batch_size", "lr", "warmup", "final_lr_fraction", "seed"):
        assert getattr(study.train, key) == getattr(preset.train, key), key
    # Its token budget is what the preset's fixed-first run gets at the preset's FLOP budget.
    assert plan_run(study).tokens == plan_run(preset).tokens


# The schedules as `--set` strings, as the studies wrote them before they were typed values: a
# run trained then is one the studies still reuse only if they plan the very same configuration.
PAPER_OVERRIDES = {
    "fixed-4": ["schedule.kind=fixed", "schedule.depth=4"],
    "uniform-1-16": ["schedule.kind=uniform", "schedule.k_min=1", "schedule.k_max=16"],
    "fixed-first-4-0.8": ["schedule.kind=fixed-first", "schedule.k0=4", "schedule.switch=0.8",
                          "schedule.finish=uniform", "schedule.k_min=1", "schedule.k_max=16"],
    "fixed-first-2-0.67": ["schedule.kind=fixed-first", "schedule.k0=2", "schedule.switch=0.67",
                           "schedule.finish=uniform", "schedule.k_min=1", "schedule.k_max=16"],
    "progressive": ["schedule.kind=progressive", "schedule.k_min=1", "schedule.k_max=16"],
}  # fmt: skip
WSD = ["train.lr_schedule=wsd", "train.decay=0.2"]


def test_the_studies_plan_the_runs_their_set_strings_planned():
    from fixedfirst.config import RunConfig, apply_overrides
    from fixedfirst.studies.ablation.experiment import load_ablation
    from fixedfirst.studies.bios.experiment import load_preset as bios
    from fixedfirst.studies.chains.experiment import load_preset as chains

    def planned(base: dict, *overrides: str) -> RunConfig:
        return RunConfig.from_dict(apply_overrides(base, list(overrides)))

    loop = bios("loop")
    assert "fixed-first-4-0.8-wsd" in loop.experiment.schedules
    for run in loop.runs():
        arm, seed = run.name.rsplit("-seed", 1)
        schedule = [*PAPER_OVERRIDES[arm.removesuffix("-wsd")], *(WSD if "wsd" in arm else [])]
        snapshots = f"train.snapshots=[{', '.join(map(repr, loop.experiment.snapshots))}]"
        budget = [f"train.flops={loop.experiment.flops!r}", snapshots, f"train.seed={seed}"]
        assert run.config == planned(loop.base, *budget, *schedule), run.name
    default = chains("default")
    assert len(default.runs()) == 25
    for run in default.runs():
        arm, seed = run.name.rsplit("-seed", 1)
        budget = [f"train.flops={default.experiment.flops!r}", f"train.seed={seed}"]
        assert run.config == planned(default.base, *budget, *PAPER_OVERRIDES[arm]), run.name
    ablation = load_ablation("bios", "smoke", [], 2, [0, 1])
    for run in ablation.runs():
        variant, seed = run.name.rsplit("-seed", 1)
        model = []
        if variant != "preset":
            switch, value = variant.split("=")
            model = [f"model.{switch}={value if value in ('true', 'false') else repr(value)}"]
        budget = [f"train.flops={ablation.experiment.flops!r}", f"train.seed={seed}"]
        fixed = ["schedule.kind=fixed", "schedule.depth=2"]
        assert run.config == planned(ablation.base, *fixed, *budget, *model), run.name
