"""lm-evaluation-harness, offline: a local multiple-choice task scored end to end through the
harness on a tiny run, its log-likelihoods checked against the model directly; generation,
rolling log-likelihood, registration, and `fixedfirst downstream`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# No hub: the local task must not need it, and a test that tried would fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

lm_eval = pytest.importorskip("lm_eval")

from fixedfirst.cli.main import main  # noqa: E402
from fixedfirst.harness import register  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "tests" / "harness_task"
TASK = "fixedfirst_tiny_mc"
DOCS = [json.loads(line) for line in (TASK_DIR / "tiny_mc.jsonl").read_text().splitlines()]


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the task's data_files path is relative to the repository root


@pytest.fixture(scope="module")
def lm(text_run):
    from fixedfirst.harness.model import FixedFirstLM

    return FixedFirstLM(str(text_run / "run"), depth=3, batch_size=4, device="cpu")


def direct_loglikelihood(model, context: str, continuation: str, depth: int) -> float:
    """log p(continuation | EOD + context) from one plain forward of the model (bytes)."""
    ids = [256, *context.encode(), *continuation.encode()]
    n = len(continuation.encode())
    logits = model(torch.tensor([ids[:-1]]), depth)[0, -n:]
    target = torch.tensor(ids[-n:])
    return F.log_softmax(logits, -1).gather(1, target[:, None]).sum().item()


def test_multiple_choice_task_end_to_end(lm, at_root):
    from lm_eval.tasks import TaskManager

    lm.set_depth(3)
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(TASK_DIR), include_defaults=False),
        log_samples=True,
    )
    samples = out["samples"][TASK]
    assert len(samples) == len(DOCS)
    correct = correct_norm = 0
    for sample in samples:
        doc = sample["doc"]
        context = f"Question: {doc['question']}\nAnswer:"
        direct = [direct_loglikelihood(lm.model, context, f" {c}", 3) for c in doc["choices"]]
        harness = [resp[0][0] for resp in sample["resps"]]
        assert harness == pytest.approx(direct, abs=1e-4)
        best = max(range(len(direct)), key=direct.__getitem__)
        per_byte = [ll / len(c) for ll, c in zip(direct, doc["choices"], strict=True)]
        best_norm = max(range(len(direct)), key=per_byte.__getitem__)
        correct += best == doc["label"]
        correct_norm += best_norm == doc["label"]
    result = out["results"][TASK]
    assert result["acc,none"] == pytest.approx(correct / len(DOCS))
    assert result["acc_norm,none"] == pytest.approx(correct_norm / len(DOCS))


def test_loglikelihood_left_truncates_to_the_window(lm):
    from lm_eval.api.instance import Instance

    lm.set_depth(2)
    window = lm.model.config.max_seq_len
    context, continuation = "the river " * 20, "harbor"
    request = Instance("loglikelihood", {}, (context, continuation), 0)
    ((logprob, greedy),) = lm.loglikelihood([request])
    ids = [256, *context.rstrip().encode(), *f" {continuation}".encode()]
    inputs = ids[:-1][-window:]
    logits = lm.model(torch.tensor([inputs]), 2)[0, -7:]
    target = torch.tensor(ids[-7:])
    want = F.log_softmax(logits, -1).gather(1, target[:, None]).sum().item()
    assert logprob == pytest.approx(want, abs=1e-4)
    assert greedy == bool((logits.argmax(-1) == target).all())


def test_loglikelihood_rolling_scores_every_byte_once(lm):
    from lm_eval.api.instance import Instance

    lm.set_depth(2)
    short, long = "the lamp", "the cedar stone " * 9
    got = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate([short, long])]
    )
    ids = torch.tensor([[256, *short.encode()]])
    logits = lm.model(ids[:, :-1], 2)
    want = -F.cross_entropy(logits[0], ids[0, 1:], reduction="sum").item()
    assert got[0] == pytest.approx(want, abs=1e-4)
    assert len(long.encode()) + 1 > lm.model.config.max_seq_len  # more than one window
    assert got[1] < got[0] < 0


def test_generate_until_is_greedy_generation_cut_at_the_stop(lm):
    from lm_eval.api.instance import Instance

    lm.set_depth(3)
    context = "the river"
    request = Instance("generate_until", {}, (context, {"until": ["lamp"], "max_gen_toks": 20}), 0)
    (text,) = lm.generate_until([request])
    prompt = torch.tensor([[256, *context.encode()]])
    new = lm.model.generate(prompt, 20, 3)[0, prompt.shape[1] :].tolist()
    new = new[: new.index(256)] if 256 in new else new
    full = bytes(new).decode("utf-8", errors="replace")
    assert text == (full[: full.index("lamp")] if "lamp" in full else full)


def test_kl_exit_with_threshold_zero_scores_like_max_depth(text_run, lm):
    from lm_eval.api.instance import Instance

    from fixedfirst.harness.model import FixedFirstLM

    kl = FixedFirstLM(str(text_run / "run"), exit="kl", threshold=0.0, max_depth=4)
    lm.set_depth(4)
    requests = [
        Instance("loglikelihood", {}, ("Question: a tree?\nAnswer:", c), i)
        for i, c in enumerate([" cedar", " orbit"])
    ]
    for (a, ga), (b, gb) in zip(
        kl.loglikelihood(requests), lm.loglikelihood(requests), strict=True
    ):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb


def test_the_harness_finds_the_model_by_name():
    from lm_eval.api.registry import get_model

    from fixedfirst.harness.model import FixedFirstLM

    register()
    assert get_model("fixedfirst") is FixedFirstLM
    assert get_model("dummy").__name__ == "DummyLM"  # the built-in models are still there


def test_entry_point_names_the_model_class():
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group="lm_eval.models") if p.name == "fixedfirst"]
    assert point.value == "fixedfirst.harness.model:FixedFirstLM"


def test_fixedfirst_lm_eval_command(text_run, tmp_path, monkeypatch, at_root, capsys):
    """The harness's own command line, with `--model fixedfirst` registered. (Its task index
    is limited to the local task: indexing the harness's built-in tasks takes ~20 s and this
    test is about finding the model.)"""
    import functools

    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    from fixedfirst.harness.cli import main as harness_main

    local_only = functools.partial(TaskManager, include_defaults=False)
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", local_only)
    # The harness's command line gives its logger a handler on this test's (captured) stderr;
    # put the logger back afterwards, or later tests would log into a closed stream.
    import logging

    import lm_eval.utils

    logger = logging.getLogger("lm_eval")
    for attribute in ("handlers", "propagate", "level"):
        monkeypatch.setattr(logger, attribute, getattr(logger, attribute))
    monkeypatch.setattr(logger, "handlers", list(logger.handlers))
    monkeypatch.setattr(lm_eval.utils, "_LOGGING_CONFIGURED", lm_eval.utils._LOGGING_CONFIGURED)

    model_args = f"run={text_run / 'run'},depth=2"
    argv = ["run", "--model", "fixedfirst", "--model_args", model_args, "--tasks", TASK]
    argv += ["--include_path", str(TASK_DIR), "--device", "cpu", "--output_path", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", ["fixedfirst-lm-eval", *argv])
    try:
        harness_main()
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr().out
    assert TASK in out and "acc_norm" in out
    (result_file,) = tmp_path.rglob("results_*.json")
    assert TASK in json.loads(result_file.read_text())["results"]


def test_downstream_writes_a_table_per_depth(text_run, tmp_path, capsys, at_root):
    out = tmp_path / "down"
    args = [
        "downstream",
        text_run / "run",
        "--tasks",
        TASK,
        "--include-path",
        TASK_DIR,
        "--depths",
        "1,3",
        "--out",
        out,
    ]
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    assert info.value.code == 0, capsys.readouterr().err
    report = json.loads((out / "downstream.json").read_text())
    assert report["depths"] == [1, 3] and report["tasks"] == [TASK]
    for depth in ("1", "3"):
        entry = report["results"][TASK][depth]
        assert 0.0 <= entry["acc"] <= 1.0 and 0.0 <= entry["acc_norm"] <= 1.0
        assert entry["samples"] == len(DOCS)
    table = (out / "downstream.md").read_text()
    assert "| task | metric | K=1 | K=3 |" in table and f"| {TASK} | acc_norm |" in table


def test_downstream_without_the_network_is_one_line(text_run, tmp_path, monkeypatch, capsys):
    """A task whose dataset is on the hub, the hub unreachable: one line saying so, quickly."""
    import fixedfirst.harness.downstream as downstream

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, os.environ.get(name, "0"))  # restored after the test
    monkeypatch.setattr(downstream, "hub_reachable", lambda *a, **k: False)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    yaml = (TASK_DIR / "fixedfirst_tiny_mc.yaml").read_text()
    yaml = yaml.replace("task: fixedfirst_tiny_mc", "task: on_the_hub")
    yaml = yaml.replace("dataset_path: json", "dataset_path: fixedfirst-tests/not-downloaded")
    (tasks / "on_the_hub.yaml").write_text(yaml)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(
            [
                "downstream",
                str(text_run / "run"),
                "--tasks",
                "on_the_hub",
                "--depths",
                "1",
                "--include-path",
                str(tasks),
                "--out",
                str(out),
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1, err
    assert "needs the network" in err[0] and "huggingface.co" in err[0]
    assert not out.exists()
