"""Issue 66 end to end: a looped checkpoint written by stock transformers' save_pretrained (with a
tokenizer, in shards; tests/checkpoint_helpers.py) is prepared for, finished (full fine-tuning,
and low-rank, where peft is installed), profiled by depth beside its control and
handed back, and the result loads in stock transformers (the full finish's in a process that never
imports fixedfirst; the low-rank one's merged weights in this process, the same format) with the
logits fixedfirst computes at depths 1..6, within 1e-5. A finish paused and
resumed trains what one straight through trains, bit for bit; a resume from other weights is
refused; our own Hugging Face export is a checkpoint too."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixedfirst.cli.main import main
from fixedfirst.runs.opening import load_any_run
from tests.checkpoint_helpers import NATIVE_DEPTH, corpus, save_checkpoint, transformers_tokens
from tests.inkling_helpers import VOCAB, needs_inkling

pytestmark = needs_inkling

DEPTHS = range(1, 7)
SERVED_PROMPT = "the river stone"
SERVED_TOKENS = 10
TOLERANCE = 1e-5
TINY_RUN = [
    "--set",
    "train.batch_size=4",
    "--set",
    "train.seq_len=16",
    "--set",
    "train.lr=3e-3",
    "--set",
    "train.log_every=4",
    "--set",
    "train.device=cpu",
    "--set",
    "eval.batches=2",
]
"""Steps of 4 rows of 16 tokens, evaluated on 2 batches of 4 blocks."""
LOWRANK_RUN = ["--set", "train.lowrank.rank=4", "--set", "train.lr=3e-3"]
"""Rank-4 adapters on the default targets."""
needs_peft = pytest.mark.skipif(
    importlib.util.find_spec("peft") is None,
    reason="low-rank finishing needs peft (the lowrank extra: pip install 'fixedfirst[lowrank]')",
)
STOCK = """
import json, sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32{remote}).eval()
tokens = torch.tensor(json.loads(sys.argv[2]))
key = sys.argv[3]
logits = {{}}
with torch.no_grad():
    for depth in range(1, 7):
        setattr(model.config, key, depth)
        logits[depth] = model(input_ids=tokens).logits
torch.save(logits, sys.argv[4])
assert not any(name.startswith("fixedfirst") for name in sys.modules), "fixedfirst imported"
"""


def printed(capsys, *args: object) -> str:
    """What a command prints on stdout (it must succeed)."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    assert info.value.code == 0, captured.err
    return captured.out


def cli(*args: object) -> None:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    assert info.value.code == 0


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The checkpoint (trained at NATIVE_DEPTH passes, in shards) and text prepared with its
    tokenizer."""
    root = tmp_path_factory.mktemp("checkpoint")
    save_checkpoint(root / "ckpt")
    (root / "corpus.txt").write_text(corpus())
    data = root / "data"
    cli("prepare", root / "corpus.txt", "--out", data, "--tokenizer", root / "ckpt")
    cli("prepare", root / "corpus.txt", "--out", data, "--tokenizer", root / "ckpt")  # no-op
    return root


def finish(made: Path, out: Path, *extra: object) -> None:
    cli("finish", made / "ckpt", "--data", made / "data", "--out", out, *TINY_RUN, *extra)


def stock_logits(directory: Path, tokens: torch.Tensor, tmp: Path, key: str, remote: bool):
    """The handed-back model's logits at depths 1..6, computed by stock transformers in a
    process of its own that never imports fixedfirst."""
    script = STOCK.format(remote=", trust_remote_code=True" if remote else "")
    out = tmp / "stock.pt"
    subprocess.run(
        [sys.executable, "-c", script, str(directory), json.dumps(tokens.tolist()), key, str(out)],
        check=True,
        capture_output=True,
        cwd=tmp,
    )
    return torch.load(out)


def stock_nll(checkpoint: Path, run: Path, depths: list[int]) -> dict[int, float]:
    """NLL per token of the checkpoint loaded by stock transformers on the run's held-out
    blocks, by torch's cross-entropy."""
    from transformers import AutoModelForCausalLM

    from fixedfirst.runs.opening import find_checkpoint, trained_source

    config, _ = find_checkpoint(run)
    source = trained_source(config, None)
    batches = source.validation_batches(config.eval.batches, config.train.micro_batch())
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    out = {}
    for depth in depths:
        model.config.loop_num_passes = depth
        total, count = 0.0, 0
        with torch.no_grad():
            for batch in batches:
                logits = model(input_ids=batch.inputs).logits
                total += torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), batch.targets.flatten(), reduction="sum"
                ).item()
                count += batch.targets.numel()
        out[depth] = total / count
    return out


def stock_logits_here(directory: Path, tokens: torch.Tensor) -> dict[int, torch.Tensor]:
    """STOCK's calls in this process (which has imported fixedfirst): for a hand-back whose
    format a fresh process has already loaded, one interpreter's start (torch and transformers,
    about 6 s of CPU) saved."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    logits = {}
    with torch.no_grad():
        for depth in DEPTHS:
            model.config.loop_num_passes = depth
            logits[depth] = model(input_ids=tokens).logits
    return logits


def assert_same_logits(
    run: Path,
    handed_back: Path,
    tmp: Path,
    key="loop_num_passes",
    remote=False,
    fresh_process=True,
):
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(5))
    if fresh_process:
        theirs = stock_logits(handed_back, tokens, tmp, key, remote)
    else:
        assert key == "loop_num_passes" and not remote, "in this process: the stock class only"
        theirs = stock_logits_here(handed_back, tokens)
    model = load_any_run(run).model
    with torch.no_grad():
        ours = {depth: model(tokens, depth) for depth in DEPTHS}
    for depth in DEPTHS:
        assert (ours[depth] - theirs[depth]).abs().max().item() <= TOLERANCE, depth
    # The depth matters, so that a model serving the wrong depth would be caught.
    assert (ours[1] - ours[NATIVE_DEPTH]).abs().max().item() > 100 * TOLERANCE
    assert (ours[5] - ours[6]).abs().max().item() > 100 * TOLERANCE


def test_full_finish_profile_and_hand_back(made, tmp_path):
    out = tmp_path / "finish"
    finish(made, out, "--tokens", 512, "--control")
    profile = json.loads((out / "profile.json").read_text())
    assert list(profile["models"]) == ["checkpoint", "control", "finished"]
    assert profile["checkpoint"]["depth"] == NATIVE_DEPTH
    assert profile["depths"] == [*range(1, 7), 12]  # 1..max(6, 2 x 3) and twice that
    assert profile["blocks"] == 8 and (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert profile["runs"]["finished"]["tokens"] == profile["runs"]["control"]["tokens"] == 512
    control = (out / "control" / "config.toml").read_text()
    assert 'kind = "fixed"' in control and f"depth = {NATIVE_DEPTH}" in control
    for name, model in profile["models"].items():
        for d, nll in model["nll_by_depth"].items():
            bounds = model["interval_by_depth"][d]
            assert bounds["low"] < nll < bounds["high"], (name, d)
    # The checkpoint's NLL is stock transformers' own, on the blocks the run is scored on.
    stock = stock_nll(made / "ckpt", out / "finished", [1, NATIVE_DEPTH, 6])
    for depth, nll in stock.items():
        found = profile["models"]["checkpoint"]["nll_by_depth"][str(depth)]
        assert found == pytest.approx(nll, abs=TOLERANCE)
    handed_back = tmp_path / "handed-back"
    cli("export", out / "finished", "--format", "checkpoint", "--out", handed_back)
    assert_same_logits(out / "finished", handed_back, tmp_path)
    card = (handed_back / "README.md").read_text()
    assert "finished for depths 1..6" in card and "| 3 (trained) |" in card
    assert json.loads((handed_back / "config.json").read_text())["loop_num_passes"] == NATIVE_DEPTH
    assert (handed_back / "tokenizer.json").is_file()


@pytest.fixture(scope="module")
def lowrank(made, tmp_path_factory) -> Path:
    """A low-rank finish of the checkpoint (rank-4 adapters, 4 steps; FINISH/finished) and its
    hand-back with the adapters merged (merged/)."""
    root = tmp_path_factory.mktemp("lowrank")
    finish(made, root / "finish", "--tokens", 256, *LOWRANK_RUN)
    cli("export", root / "finish" / "finished", "--format", "checkpoint", "--out", root / "merged")
    return root


@needs_peft
def test_low_rank_finish_merged_and_alone(made, lowrank, tmp_path):
    out, merged = lowrank / "finish", lowrank / "merged"
    # The same format as the full finish's hand-back, which a fresh process loads: here the
    # merged weights are what is checked, in this process.
    assert_same_logits(out / "finished", merged, tmp_path, fresh_process=False)
    # The frozen base is the checkpoint's: what the adapters leave alone is its weights.
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(made / "ckpt", dtype=torch.float32).eval()
    finished = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    for name in ("lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert torch.equal(base.get_parameter(name), finished.get_parameter(name)), name
    alone = tmp_path / "alone"
    cli("export", out / "finished", "--format", "checkpoint", "--out", alone, "--adapters", "alone")
    assert (alone / "adapter_config.json").is_file() and not (alone / "config.json").exists()
    assert "low-rank adapters of rank 4" in (merged / "README.md").read_text()
    assert "PeftModel.from_pretrained(base, path)" in (alone / "README.md").read_text()
    # The adapters alone, on top of the original checkpoint, compute what the merged model does.
    from peft import PeftModel

    adapted = PeftModel.from_pretrained(base, alone).eval()
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        for depth in DEPTHS:
            for model in (adapted.get_base_model(), finished):
                model.config.loop_num_passes = depth
            a, b = adapted(input_ids=tokens).logits, finished(input_ids=tokens).logits
            assert (a - b).abs().max().item() <= TOLERANCE, depth


@needs_peft
def test_a_low_rank_run_serves_what_its_merged_hand_back_decodes(made, lowrank, capsys):
    """`generate` of the low-rank run itself (its adapters on the frozen base) decodes, at two
    depths, the tokens transformers' own generate decodes from the merged hand-back at those
    passes, and depth-speculated the verify depth's; the adapters change those tokens (the
    base checkpoint decodes others), so a server that dropped them would fail."""
    from fixedfirst.runs.served import load_served
    from fixedfirst.serve.generation import generate_text, prompt_ids
    from fixedfirst.serve.modes import FixedDepth, Sampling

    run, merged = lowrank / "finish" / "finished", lowrank / "merged"
    served = load_served(run)
    assert served.tokenizer is not None
    prompt, stop = prompt_ids(served, SERVED_PROMPT), served.tokenizer.stop_id
    adapted = []
    for depth in (1, 4):
        reference = transformers_tokens(merged, prompt, depth, stop, SERVED_TOKENS)
        assert len(reference) >= 3
        mode = FixedDepth(depth, Sampling(0.0, 0))
        steps = list(generate_text(served, SERVED_PROMPT, SERVED_TOKENS, mode))
        assert [s.token for s in steps] == reference, depth
        args = ["--prompt", SERVED_PROMPT, "--depth", depth, "--max-new-tokens", SERVED_TOKENS]
        text = printed(capsys, "generate", run, *args)
        assert text == "".join(s.text for s in steps) + "\n"
        base = transformers_tokens(made / "ckpt", prompt, depth, stop, SERVED_TOKENS)
        adapted.append(base != reference)
    assert any(adapted)
    speculated = printed(capsys, "generate", run, *args, "--speculate", "1:3")
    assert speculated == text


def test_paused_finish_resumes_bit_identically(made, tmp_path):
    straight, paused = tmp_path / "straight", tmp_path / "paused"
    short = ["--tokens", 512, "--set", "eval.depths=[1,2]"]  # a short profile: not its subject
    finish(made, straight, *short)
    finish(made, paused, *short, "--stop-after", 3)
    assert not (paused / "profile.json").exists()
    finish(made, paused, *short)
    a = load_file(
        sorted((straight / "finished" / "checkpoints").glob("step-*"))[-1] / "model.safetensors"
    )
    b = load_file(
        sorted((paused / "finished" / "checkpoints").glob("step-*"))[-1] / "model.safetensors"
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_from_other_weights_is_refused(made, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt)
    out = tmp_path / "finish"
    cli(
        "finish",
        ckpt,
        "--data",
        made / "data",
        "--out",
        out,
        "--tokens",
        512,
        "--stop-after",
        2,
        *TINY_RUN,
    )
    save_checkpoint(ckpt, seed=7)  # the same place, other weights
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["train", "--resume", "--out", str(out / "finished")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "its weights are not those this run started from" in err


@pytest.mark.slow
def test_finish_stopped_by_sigterm_resumes_when_invoked_again(made, tmp_path):
    """SIGTERM mid-run: a checkpoint, the requeue status (75) and a line saying to run the same
    command again, which resumes the run and goes on to the control and the profile."""
    import os
    import signal
    import time

    out = tmp_path / "finish"
    argv = [sys.executable, "-m", "fixedfirst", "finish", str(made / "ckpt"), "--data"]
    argv += [str(made / "data"), "--out", str(out), "--tokens", "2048", "--control", *TINY_RUN]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    metrics = out / "finished" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 75
    assert "run the same `fixedfirst finish` command again" in err
    again = subprocess.run(argv, capture_output=True, env=env, text=True, timeout=600)
    assert again.returncode == 0 and "resume: continuing from step-" in again.stdout
    assert (out / "profile.json").is_file()


@pytest.mark.slow
def test_finish_in_two_processes(made, tmp_path):
    """`--nproc 2`: both runs trained by two DDP processes, the profile written by rank 0."""
    import os

    out = tmp_path / "finish"
    argv = [sys.executable, "-m", "fixedfirst", "finish", str(made / "ckpt"), "--data"]
    argv += [str(made / "data"), "--out", str(out), "--tokens", "512", "--control", "--nproc", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*argv, *TINY_RUN], capture_output=True, env=env, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    profile = json.loads((out / "profile.json").read_text())
    assert list(profile["models"]) == ["checkpoint", "control", "finished"]
    summary = json.loads((out / "finished" / "summary.json").read_text())
    assert summary["steps"] == summary["total_steps"] == 8
