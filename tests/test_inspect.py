"""`fixedfirst inspect`: the page's numbers against independent computations (eval's NLL on the
same tokens, separate forwards per depth, generation under an exit rule, the chains task's own
scoring), task labels, the page's size, and that a page survives any token text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fixedfirst.cli.main import main
from fixedfirst.data.tokenizer import ByteTokenizer
from fixedfirst.inspection import inspect_sequences, page_record, read_page_record
from fixedfirst.inspection.sources import text_sequence
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.serve.modes import Adaptive

ABOUT = {"run": "run", "schedule": "fixed-first", "source": "a text", "precision": "fp32"}
CHAINS_TOML = """
[data]
kind = "chains"

[data.chains]
statements = 20
values = 8
max_ops = 4
eval_ops = 12

[model]
vocab_size = 13
d_model = 32
n_heads = 4
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 21
injection = "add"
state_init = "zeros"

[schedule]
kind = "uniform"
k_max = 8

[train]
seq_len = 21
batch_size = 16
tokens = 13_440
lr = 3e-3
log_every = 10

[eval]
depths = [1, 8]
batches = 1
"""


def run_cli(*argv: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0


@pytest.fixture(scope="module")
def chains_run(tmp_path_factory):
    """A chains run of 40 steps: far from perfect, so its answers are right at some depths and
    wrong at others."""
    from fixedfirst.config import load_config
    from fixedfirst.train.trainer import Trainer

    root = tmp_path_factory.mktemp("chains-run")
    (root / "chains.toml").write_text(CHAINS_TOML)
    Trainer(load_config(root / "chains.toml"), root / "run", quiet=True).train()
    return root / "run"


def test_page_numbers_equal_eval_on_the_same_sequences(text_run, tmp_path):
    """eval's first validation batch is sequences 0..7 (micro batch 8): the mean of the page's
    per-position NLL at each depth is eval's NLL there."""
    run = text_run / "run"
    run_cli("eval", str(run), "--depths", "1,2,3,6", "--batches", "1", "--out", str(tmp_path / "e"))
    evaluated = json.loads((tmp_path / "e").read_text())
    page = tmp_path / "val.html"
    run_cli("inspect", str(run), "--validation", "0..7", "--depths", "1,2,3,6", "--out", str(page))
    record = read_page_record(page)
    nll = np.array(record["nll"], dtype=float)
    assert record["depths"] == [1, 2, 3, 6]
    assert np.isfinite(nll).sum() == 4 * evaluated["scored_tokens"]
    for i, depth in enumerate(record["depths"]):
        expected = evaluated["nll_by_depth"][str(depth)]
        assert np.nanmean(nll[i]) == pytest.approx(expected, abs=1e-5)
        assert record["summary"]["nll_by_depth"][str(depth)] == pytest.approx(expected, abs=1e-6)
    assert (tmp_path / "val.png").read_bytes()[:4] == b"\x89PNG"


def test_a_long_text_is_scored_window_by_window_like_separate_forwards(text_run, tmp_path):
    """Every position's NLL, top prediction and the depth it settles at, against one forward per
    depth and window (not the one-pass evaluation the page uses)."""
    from fixedfirst.runs.served import load_served

    text = "the river stone lamp " * 7 + "orbit cedar quartz violet harbor " * 2  # 213 bytes
    (tmp_path / "text.txt").write_text(text)
    page = tmp_path / "text.html"
    depths = [1, 2, 5]
    run_cli(
        "inspect",
        str(text_run / "run"),
        "--file",
        str(tmp_path / "text.txt"),
        "--depths",
        "1,2,5",
        "--out",
        str(page),
    )
    record = read_page_record(page)
    ids = [ByteTokenizer().start_id, *text.encode()]
    assert record["inputs"] == ids[:-1]
    assert record["targets"] == ids[1:]
    assert record["windows"] == [[0, 64], [64, 128], [128, 192], [192, 213]]
    model = load_served(text_run / "run").model
    expected_nll, expected_top = [], []
    for depth in depths:
        nll, top = [], []
        for start, end in record["windows"]:
            logits = model(torch.tensor([ids[start:end]]), depth)[0]
            logprobs = F.log_softmax(logits, dim=-1)
            nll += (
                -logprobs[torch.arange(end - start), torch.tensor(ids[start + 1 : end + 1])]
            ).tolist()
            top += logits.argmax(-1).tolist()
        expected_nll.append(nll)
        expected_top.append(top)
    np.testing.assert_allclose(np.array(record["nll"]), expected_nll, atol=6e-6)
    assert record["top"] == expected_top
    for p in range(len(ids) - 1):  # settled: the first depth from which the top never changes
        tops = [expected_top[i][p] for i in range(len(depths))]
        settled = next(d for i, d in enumerate(depths) if all(t == tops[-1] for t in tops[i:]))
        assert record["stable_from"][p] == settled


def test_exit_rules_stop_where_generation_stops(text_run):
    """Generating from the start token alone decodes every position under the rule, so on the
    text it generated the page's stopping depths are generation's."""
    from fixedfirst.data.registry import ScoredSequence
    from fixedfirst.runs.served import load_served
    from fixedfirst.serve.adaptive import stream_adaptive
    from fixedfirst.serve.exit_rules import EXIT_RULES, exit_rule

    served = load_served(text_run / "run")
    start = torch.tensor([[served.tokenizer.start_id]])
    for name in EXIT_RULES:
        rule = exit_rule(name, None, 6)
        generated = list(stream_adaptive(served.model, start, 40, Adaptive(rule)))
        tokens = [served.tokenizer.start_id, *(int(t[0, 0]) for t, _ in generated)]
        sequence = ScoredSequence(tokens[:-1], tokens[1:], "generated")
        inspection = inspect_sequences(served.model, [sequence], [1, 3, 6], [Adaptive(rule)])
        assert inspection.rules[0].depth.tolist() == [int(d[0]) for _, d in generated], name
        assert inspection.rules[0].top.tolist() == tokens[1:], name  # greedy: its own argmax


def test_chains_example_is_scored_like_the_task(chains_run, tmp_path):
    """The labels are the evaluation program's, and right/wrong at each depth on the long chain
    is the chains task's own correctness (tasks/chains/accuracy.py)."""
    from fixedfirst.data.registry import kind_options
    from fixedfirst.runs.opening import load_run
    from fixedfirst.tasks.chains.accuracy import correctness_by_depth
    from fixedfirst.tasks.chains.source import evaluation_set

    page = tmp_path / "chains.html"
    run_cli(
        "inspect", str(chains_run), "--task-example", "0..2", "--depths", "1..8", "--out", str(page)
    )
    record = read_page_record(page)
    loaded = load_run(chains_run)
    evaluation = evaluation_set(kind_options(loaded.config), loaded.config.data.seed, 3)
    assert record["inputs"] == evaluation.batch.inputs.flatten().tolist()
    assert [IGNORE_INDEX if t is None else t for t in record["targets"]] == (
        evaluation.batch.targets.flatten().tolist()
    )
    assert not any(s["reads_as_text"] for s in record["sequences"])
    correct = correctness_by_depth(loaded.model, evaluation, record["depths"]).correct
    top, targets = np.array(record["top"]), np.array(record["targets"])
    for n in range(3):
        long_chain = [21 * n + int(p) for p in evaluation.positions[n]]
        for p, difficulty in zip(long_chain, range(13), strict=True):
            note = record["answers"][str(p)]
            assert note.startswith("long chain") and (str(difficulty) in note or difficulty == 0)
        right = top[:, long_chain] == targets[long_chain]
        assert (right == correct[:, n, :]).all()
    assert 0 < correct.mean() < 1  # some right, some wrong: the comparison can fail


def test_chains_text_is_labelled_with_its_chains_values(chains_run, tmp_path):
    page = tmp_path / "typed.html"
    run_cli(
        "inspect",
        str(chains_run),
        "--prompt",
        "neg 3 +1 neg neg +1 7 neg",
        "--depths",
        "1,2",
        "--out",
        str(page),
    )
    record = read_page_record(page)
    shown = [None if t is None else record["tokens"][str(t)] for t in record["targets"]]
    # values mod 8: 3, 4, -4 = 4, -4 = 4, 5, then 7, -7 = 1; no chain before the first number
    assert shown == [None, None, "3", "4", "4", "4", "5", "7", "1"]
    assert record["answers"]["2"] == "start value" and record["answers"]["6"] == "4 operations"


def test_bios_example_marks_the_answer_tokens(tmp_path):
    from fixedfirst.config import load_config
    from fixedfirst.data.registry import kind_options
    from fixedfirst.tasks.bios.example import biography_example
    from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
    from fixedfirst.tasks.bios.world import ATTRIBUTES, build_world

    (tmp_path / "bios.toml").write_text('[data]\nkind = "bios"\n[data.bios]\npeople = 6\n')
    config = load_config(tmp_path / "bios.toml")
    sequence = biography_example(config, 2)
    world = build_world(kind_options(config), config.data.seed)
    tokenizer = BiosTokenizer.for_pools(world.pools)
    answered: dict[str, list[int]] = {}
    for position, note in sorted(sequence.answers.items()):
        answered.setdefault(note, []).append(sequence.targets[position])
    expected = {
        f"{a.replace('_', ' ')}: {world.value(2, a)}": tokenizer.encode(f"{world.value(2, a)} .")
        for a in ATTRIBUTES
    }
    assert answered == expected
    assert sequence.targets == [*sequence.inputs[1:], tokenizer.eos_id]
    assert world.names[2] in sequence.title


def test_two_thousand_tokens_make_a_page_under_two_megabytes(text_run):
    """At the default 18 depths. The exit rules stop by depth 4 here instead of 64 (the page
    holds their stopping depths either way; running them to 64 would only take longer)."""
    from fixedfirst.evaluation.nll import EVAL_DEPTHS
    from fixedfirst.inspection.page import render_page
    from fixedfirst.runs.served import load_served
    from fixedfirst.serve.exit_rules import EXIT_RULES, exit_rule

    served = load_served(text_run / "run")
    words = ["the", "river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    text = " ".join(np.random.default_rng(1).choice(words, size=600))[:2000]
    sequence = text_sequence(served.tokenizer, served.run.config, text, "a text")
    modes = [Adaptive(exit_rule(name, None, 4)) for name in EXIT_RULES]
    inspection = inspect_sequences(served.model, [sequence], EVAL_DEPTHS, modes)
    record = page_record(inspection, served.tokenizer, 257, {**ABOUT, "checkpoint": "run"})
    page = render_page(record).encode()
    assert len(record["inputs"]) == 2000 and len(record["depths"]) == 18
    assert 500_000 < len(page) < 2_000_000  # and it does hold the numbers


def test_token_text_cannot_break_out_of_the_page(text_run, tmp_path):
    text = "</script><script>alert(1)</script> <!-- & \n\t caf\u00e9"
    page = tmp_path / "odd.html"
    run_cli(
        "inspect", str(text_run / "run"), "--prompt", text, "--depths", "1,2", "--out", str(page)
    )
    html = page.read_text()
    assert html.count("<script") == 2  # the data and the drawing code, nothing from the text
    record = read_page_record(page)
    assert record["inputs"][1:] == list(text.encode())[:-1]
    shown = [record["tokens"][str(t)] for t in record["targets"]]
    assert shown[:9] == list("</script>") and "↵" in shown and "⇥" in shown
    assert "\\xc3" in shown and "\\xa9" in shown  # the two bytes of é, each alone no character
    rerun = tmp_path / "odd.png"
    before = rerun.read_bytes()
    run_cli(
        "inspect", str(text_run / "run"), "--prompt", "river", "--depths", "1", "--out", str(page)
    )  # our own page and picture are replaced
    assert rerun.read_bytes() != before and math.isfinite(read_page_record(page)["nll"][0][0])


def test_a_long_prompt_stays_inside_the_pictures_title(text_run, tmp_path):
    """The title's second line is the source: a whole --prompt. The top of the picture (the
    title, above the legend) must have ink, and none at its left and right edges."""
    from matplotlib.image import imread

    words = ["the", "river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    text = " ".join(np.random.default_rng(2).choice(words, size=120))
    page = tmp_path / "long.html"
    run_cli(
        "inspect", str(text_run / "run"), "--prompt", text, "--depths", "1,2", "--out", str(page)
    )
    pixels = imread(tmp_path / "long.png")[..., :3]
    title = pixels[: int(0.4 * 130)]  # the top 0.4 inch at the figure's 130 dpi
    ink = (title < 0.5).all(axis=2)
    assert ink.sum() > 1000
    edge = int(0.1 * 130)
    assert not ink[:, :edge].any() and not ink[:, -edge:].any()


def test_a_title_line_is_shortened_in_the_middle_to_fit():
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    from fixedfirst.inspection.figure import fitted

    line = "runs/" + "x" * 300 + "/run-b48 step 400"
    shown = fitted(line, 9, 500.0)
    width = TextToPath().get_text_width_height_descent(shown, FontProperties(size=9), False)[0]
    assert 450 < width <= 500
    assert shown.startswith("runs/xx") and shown.endswith("run-b48 step 400")
    assert "\u2026" in shown
    assert fitted("costs $5 and $6", 9, 500.0) == r"costs \$5 and \$6"  # not mathematics
