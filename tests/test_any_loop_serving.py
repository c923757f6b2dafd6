"""fixedfirst's serving commands on a transformers Inkling2LoopForCausalLM run (tests/
inkling_helpers.py's tiny one, trained on byte text): `generate` at a fixed depth, with the
prompt and the new tokens at their own depths and depth-speculated, from the run and from its
export; `inspect` and `downstream` (lm-evaluation-harness) by depth; `eval --task` on a chains
run. Each is held to the model's own forward at the same depth."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fixedfirst.cli.main import main
from fixedfirst.config import load_config
from fixedfirst.data.prepare import PrepareOptions, prepare
from fixedfirst.runs.served import load_served
from fixedfirst.train.trainer import Trainer
from tests.inkling_helpers import TINY_TABLE, VOCAB, inkling_text_toml, needs_inkling

pytestmark = needs_inkling

ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "tests" / "harness_task"
TASK = "fixedfirst_tiny_mc"
PROMPT = "the river"
START = 256
"""The byte tokenizer's start-of-document id."""


def run_cli(capsys, *argv) -> tuple[str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert info.value.code == 0, captured.err
    return captured.out, captured.err


@pytest.fixture(scope="module")
def inkling_run(tmp_path_factory) -> Path:
    """The run directory of a tiny Inkling2Loop trained 8 steps on byte text."""
    root = tmp_path_factory.mktemp("inkling-text")
    rng = np.random.default_rng(0)
    words = ["the", "river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    documents = [" ".join(rng.choice(words, size=rng.integers(6, 20))) for _ in range(200)]
    (root / "corpus.txt").write_text("\n%\n".join(documents) + "\n")
    before = os.getcwd()
    os.chdir(root)
    try:
        prepare(["corpus.txt"], "data", PrepareOptions(separator="%", val_fraction=0.1))
    finally:
        os.chdir(before)
    (root / "run.toml").write_text(inkling_text_toml(str(root / "data")))
    Trainer(load_config(root / "run.toml"), root / "run", quiet=True).train()
    return root / "run"


def forward_tokens(model, prompt: str, new: int, depth: int) -> list[int]:
    """Greedy tokens from whole forwards without a cache: the independent reference."""
    ids = [START, *prompt.encode()]
    for _ in range(new):
        logits = model(torch.tensor([ids]), depth)[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt.encode()) + 1 :]


def text_of(tokens: list[int]) -> str:
    tokens = tokens[: tokens.index(START)] if START in tokens else tokens
    return bytes(tokens).decode("utf-8", errors="replace").rstrip("\ufffd")


def test_generate_at_a_fixed_depth_is_greedy_decoding_by_whole_forwards(inkling_run, capsys):
    model = load_served(inkling_run).model
    for depth in (1, 3):
        out, err = run_cli(
            capsys, "generate", inkling_run, "--prompt", PROMPT, "--depth", depth,
            "--max-new-tokens", 12,
        )  # fmt: skip
        assert out == text_of(forward_tokens(model, PROMPT, 12, depth)) + "\n"
        assert f"depth {depth}, full cache" in err
        # and transformers' own generate at the same passes
        from transformers import GenerationConfig

        model.handle.set_depth(depth)
        config = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=None)
        prompt = torch.tensor([[START, *PROMPT.encode()]])
        generated = model.network.generate(input_ids=prompt, generation_config=config)
        assert out == text_of(generated[0, prompt.shape[1] :].tolist()) + "\n"


def test_generate_speculated_and_at_own_depths(inkling_run, capsys):
    plain, _ = run_cli(
        capsys, "generate", inkling_run, "--prompt", PROMPT, "--depth", 4, "--max-new-tokens", 16
    )
    speculated, err = run_cli(
        capsys, "generate", inkling_run, "--prompt", PROMPT, "--depth", 4, "--speculate", "1:4",
        "--max-new-tokens", 16,
    )  # fmt: skip
    assert speculated == plain
    assert "speculating 4 tokens at depth 1:" in err and "accepted" in err
    out, err = run_cli(
        capsys, "generate", inkling_run, "--prompt", PROMPT, "--prefill-depth", 4,
        "--decode-depth", 1, "--max-new-tokens", 8,
    )  # fmt: skip
    assert "prefill at depth 4, decode at depth 1" in err
    # the first new token is read out at the prefill's depth; the rest at depth 1
    model = load_served(inkling_run).model
    first = forward_tokens(model, PROMPT, 1, 4)[0]
    assert out.encode()[:1] == bytes([first])


def test_an_export_generates_what_its_run_does(inkling_run, capsys, tmp_path):
    export = tmp_path / "export"
    run_cli(capsys, "export", inkling_run, "--out", export)
    config = json.loads((export / "config.json").read_text())
    assert config["model"]["kind"] == "transformers"
    args = ["--prompt", PROMPT, "--depth", 2, "--max-new-tokens", 10]
    from_run, _ = run_cli(capsys, "generate", inkling_run, *args)
    from_export, _ = run_cli(capsys, "generate", export, *args)
    assert from_export == from_run


def test_inspect_scores_every_depth_as_the_model_does(inkling_run, capsys, tmp_path):
    text = "the stone lamp and the cedar"
    out, _ = run_cli(
        capsys, "inspect", inkling_run, "--prompt", text, "--depths", "1,2,4",
        "--out", tmp_path / "page.html",
    )  # fmt: skip
    model = load_served(inkling_run).model
    ids = torch.tensor([[START, *text.encode()]])
    for depth in (1, 2, 4):
        nll = F.cross_entropy(model(ids[:, :-1], depth)[0], ids[0, 1:]).item()
        assert f"| {depth} | {nll:.4f} |" in out
    assert "mean depth" not in out  # no exit rule: no readout between the passes
    page = (tmp_path / "page.html").read_text()
    assert "no readout between its passes" in page


def test_downstream_scores_an_inkling_run_by_depth(inkling_run, capsys, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(ROOT)  # the task's data_files path is relative to the repository root
    out_dir = tmp_path / "downstream"
    run_cli(
        capsys, "downstream", inkling_run, "--tasks", TASK, "--depths", "1,3",
        "--include-path", TASK_DIR, "--out", out_dir,
    )  # fmt: skip
    report = json.loads((out_dir / "downstream.json").read_text())
    model = load_served(inkling_run).model
    docs = [json.loads(line) for line in (TASK_DIR / "tiny_mc.jsonl").read_text().splitlines()]
    for depth in (1, 3):
        right = 0
        for doc in docs:
            context = f"Question: {doc['question']}\nAnswer:".encode()
            scores = []
            for choice in doc["choices"]:
                ids = [START, *context, *f" {choice}".encode()]
                n = len(f" {choice}".encode())
                logits = model(torch.tensor([ids[:-1]]), depth)[0, -n:]
                target = torch.tensor(ids[-n:])
                scores.append(F.log_softmax(logits, -1).gather(1, target[:, None]).sum().item())
            right += int(np.argmax(scores)) == doc["label"]
        assert report["results"][TASK][str(depth)]["acc"] == pytest.approx(right / len(docs))


def test_the_harness_model_scores_an_inkling_run_at_each_depth(inkling_run):
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from fixedfirst.harness.model import FixedFirstLM

    lm = FixedFirstLM(str(inkling_run), depth=1, batch_size=2, device="cpu")
    requests = [
        Instance("loglikelihood", {}, ("the river", choice), i)
        for i, choice in enumerate([" stone", " lamp", " orbit"])
    ]
    for depth in (1, 4):
        lm.set_depth(depth)
        for (logprob, _), request in zip(lm.loglikelihood(requests), requests, strict=True):
            context, choice = request.args
            ids = [START, *context.encode(), *choice.encode()]
            logits = lm.model(torch.tensor([ids[:-1]]), depth)[0, -len(choice) :]
            target = torch.tensor(ids[-len(choice) :])
            want = F.log_softmax(logits, -1).gather(1, target[:, None]).sum().item()
            assert logprob == pytest.approx(want, abs=1e-4)


CHAINS_TOML = f"""
[data]
kind = "chains"

[data.chains]
statements = 20
values = 8
max_ops = 4
eval_ops = 12

[model]
kind = "transformers"
architecture = "Inkling2LoopForCausalLM"

[model.transformers]
{TINY_TABLE.replace(f"vocab_size = {VOCAB}", "vocab_size = 13")}

[schedule]
kind = "uniform"
k_max = 3

[train]
seq_len = 21
batch_size = 8
tokens = 1344
lr = 3e-3
log_every = 4

[eval]
depths = [1, 3]
batches = 1
"""


def test_eval_task_scores_an_inkling_chains_run_by_depth(tmp_path, capsys):
    from fixedfirst.data.registry import kind_options
    from fixedfirst.tasks.chains.source import evaluation_seed, evaluation_set

    (tmp_path / "chains.toml").write_text(CHAINS_TOML)
    config = load_config(tmp_path / "chains.toml")
    Trainer(config, tmp_path / "run", quiet=True).train()
    out_file = tmp_path / "task.json"
    run_cli(
        capsys, "eval", tmp_path / "run", "--task", "chains", "--depths", "1,3", "--limit", 16,
        "--out", out_file,
    )  # fmt: skip
    result = json.loads(out_file.read_text())
    model = load_served(tmp_path / "run", require_tokenizer=False).model
    seed = evaluation_seed(config.data.seed, config.train.seed)
    evaluation = evaluation_set(kind_options(config), seed, 16)
    expected = evaluation.batch.targets.gather(1, evaluation.positions)
    for depth in (1, 3):
        logits = model(evaluation.batch.inputs, depth)
        right = logits.argmax(-1).gather(1, evaluation.positions) == expected
        assert result["accuracy"][str(depth)] == pytest.approx(right.double().mean(0).tolist())
