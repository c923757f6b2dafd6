"""Bad input of the looped mixture-of-experts and finishing studies (`fixedfirst moe`,
`fixedfirst finishing`) and of a finishing branch (`fixedfirst branch --finish`,
`[train.finishing]`). Part of the bad-input table (tests/bad_input_cases.py,
docs/reference/bad-input.md); each refusal comes before anything is trained or written."""

from __future__ import annotations

from importlib import resources

from tests.bad_input_cases import Case
from tests.inkling_helpers import HAS_INKLING

SKIP = None if HAS_INKLING else "needs transformers >= 5.24 (Inkling2LoopForCausalLM)"
MOE = ["moe", "--preset", "smoke", "--out", "study"]
FINISHING = ["finishing", "--preset", "smoke", "--out", "study"]


def moe_preset_with_our_model() -> str:
    """The moe smoke preset with fixedfirst's own looped transformer in its [model]."""
    shipped = resources.files("fixedfirst.studies.moe") / "presets" / "smoke.toml"
    text = shipped.read_text()
    model = text[text.index("[model]") : text.index("[train]")]
    ours = "[model]\nvocab_size = 13\nd_model = 16\nn_heads = 2\nmax_seq_len = 11\n\n"
    return text.replace(model, ours)


MOE_CASES: list[Case] = [
    Case(
        "moe-unknown-arm",
        "moe",
        '`--set experiment.schedules=["fixed-3", "uniform-1-6"]` (an arm the study lacks)',
        [*MOE, "--set", 'experiment.schedules=["fixed-3", "uniform-1-6"]'],
        "experiment.schedules: choose from fixed-2, uniform-1-6",
        skip=SKIP,
    ),
    Case(
        "moe-no-reference",
        "moe",
        '`--set experiment.schedules=["fixed-2"]` (no uniform-1-6 to compare with)',
        [*MOE, "--set", 'experiment.schedules=["fixed-2"]'],
        "uniform-1-6 among them (the reference)",
        skip=SKIP,
    ),
    Case(
        "moe-one-seed",
        "moe",
        "`--set experiment.seeds=[200]` (no interval over one seed)",
        [*MOE, "--set", "experiment.seeds=[200]"],
        "experiment.seeds: at least two distinct seeds",
        skip=SKIP,
    ),
    Case(
        "moe-primary-arm-not-trained",
        "moe",
        "a primary comparison of fixed-first-2-0.67 with `--set "
        'experiment.schedules=["fixed-2", "uniform-1-6"]`',
        [*MOE, "--set", 'experiment.schedules=["fixed-2", "uniform-1-6"]'],
        "'fixed-first-2-0.67' (Fixed-first serves best shallow) is not one of the arms",
        skip=SKIP,
    ),
    Case(
        "moe-compare-depth-unmeasured",
        "moe",
        "`--set experiment.compare_depths=[1, 24]` (24 passes are not measured)",
        [*MOE, "--set", "experiment.compare_depths=[1, 24]"],
        "experiment.compare_depths: [24] not among experiment.depths",
        skip=SKIP,
    ),
    Case(
        "moe-our-model",
        "moe",
        "a moe preset whose [model] is fixedfirst's own looped transformer",
        ["moe", "--preset", "ours.toml", "--out", "study"],
        "a moe preset trains a transformers looped model",
        files={"ours.toml": moe_preset_with_our_model()},
        skip=SKIP,
    ),
    Case(
        "finishing-k-max-below-depth",
        "finishing",
        "`--set experiment.k_max=1` under bases trained at K = 2",
        [*FINISHING, "--set", "experiment.k_max=1"],
        "experiment.k_max: the finishing depths 1..k_max must reach the base's depth 2",
    ),
    Case(
        "finishing-zero-fraction",
        "finishing",
        "`--set experiment.fractions=[0, 0.1]` (the base itself is the 0% arm)",
        [*FINISHING, "--set", "experiment.fractions=[0, 0.1]"],
        "experiment.fractions: finishing stages as fractions of the base's tokens, each in (0, 10]",
    ),
    Case(
        "finishing-primary-arm-missing",
        "finishing",
        "a primary comparison of rewarm-0.2 with `--set experiment.fractions=[0.1]`",
        [*FINISHING, "--set", "experiment.fractions=[0.1]"],
        "'rewarm-0.2' (A short rewarmed finish serves shallow) is not one of the arms",
    ),
    Case(
        "finishing-control-twice",
        "finishing",
        "`--set experiment.controls=[0.1, 0.1]` (a control named twice)",
        [*FINISHING, "--set", "experiment.controls=[0.1, 0.1]"],
        "experiment.controls: the base continued at its own depth for these fractions of its "
        "tokens, each once and in (0, 10]",
    ),
    Case(
        "finishing-lowrank-twice",
        "finishing",
        "`--set experiment.lowrank=[0.1, 0.1]` (a low-rank finish named twice)",
        [*FINISHING, "--set", "experiment.lowrank=[0.1, 0.1]"],
        "experiment.lowrank: low-rank finishes for these fractions of the base's tokens, each "
        "once and in (0, 10]",
    ),
    Case(
        "finishing-lowrank-own-model",
        "finishing",
        "`--set experiment.lowrank=[0.1]` under fixedfirst's own looped transformer",
        [*FINISHING, "--set", "experiment.lowrank=[0.1]"],
        "experiment.lowrank: low-rank finishes adapt a transformers looped architecture",
    ),
    Case(
        "finishing-lowrank-adapters-unused",
        "finishing",
        "`--set train.lowrank.rank=4` in a preset without low-rank finishes",
        [*FINISHING, "--set", "train.lowrank.rank=4"],
        "[train.lowrank] sets the adapters of the low-rank finishes, and this preset has none",
    ),
    Case(
        "finishing-unknown-rate",
        "finishing",
        '`--set experiment.rates=["cosine"]`',
        [*FINISHING, "--set", 'experiment.rates=["cosine"]'],
        "experiment.rates[0]: 'cosine' is not one of 'constant', 'rewarm'",
    ),
    Case(
        "branch-finish-unfinished-run",
        "branch",
        "`fixedfirst branch run --finish 0.1 --finish-k-max 4` of a run stopped part-way",
        ["branch", "run", "--out", "new-run", "--finish", "0.1", "--finish-k-max", "4"],
        "is not; train it to the end first",
        needs=("run",),
    ),
    Case(
        "branch-finish-no-k-max",
        "branch",
        "`fixedfirst branch run --finish 0.1` without --finish-k-max",
        ["branch", "run", "--out", "new-run", "--finish", "0.1"],
        "--finish needs --finish-k-max K",
        needs=("run",),
    ),
    Case(
        "branch-k-max-alone",
        "branch",
        "`fixedfirst branch run --finish-k-max 4` without --finish",
        ["branch", "run", "--out", "new-run", "--finish-k-max", "4"],
        "--finish-k-max goes with --finish FRACTION",
        needs=("run",),
    ),
    Case(
        "finishing-lr-peak",
        "config",
        "`[train.finishing]` with `start_step = 10` and `peak = 0`",
        ["compute", "bad.toml"],
        "train.finishing.peak: must be in (0, 1], got 0",
        files={"bad.toml": "[train.finishing]\nstart_step = 10\npeak = 0\n"},
    ),
]
