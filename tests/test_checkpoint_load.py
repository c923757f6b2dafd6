"""`[model] checkpoint = DIR` (config/checkpoints.py, model/pretrained.py): the configuration a
checkpoint directory gives a run, its weights checked whole and identified by their checksum,
its tokenizer beside prepared data, its profile by depth (`fixedfirst eval DIR`) with intervals
over blocks, and fixedfirst's own Hugging Face export as such a checkpoint, finished and handed
back (loaded with trust_remote_code, in a process that never imports fixedfirst)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.config import RunConfig, load_config
from fixedfirst.config.run import model_section
from fixedfirst.errors import UserError
from fixedfirst.model.kinds import initial_model
from fixedfirst.model.pretrained import weight_files, weights_sha256
from fixedfirst.stats.intervals import ratio_interval, t_interval
from tests.checkpoint_helpers import NATIVE_DEPTH, corpus, save_checkpoint, shards
from tests.inkling_helpers import TINY, needs_inkling


def cli(*args: object) -> None:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    assert info.value.code == 0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "ckpt")


def test_ratio_interval_is_the_t_interval_of_block_means_with_equal_counts():
    rng = np.random.default_rng(0)
    means = rng.normal(3.0, 0.2, size=40)
    ratio = ratio_interval(means * 16, np.full(40, 16))
    plain = t_interval(means)
    assert (ratio.mean, ratio.low, ratio.high) == pytest.approx((plain.mean, plain.low, plain.high))


def test_ratio_interval_covers_the_token_mean_95_percent_of_the_time():
    """Blocks of unequal lengths whose tokens' NLLs share a block effect: the interval of the
    ratio estimator covers the population's NLL per token in about 95% of 2000 samples."""
    rng = np.random.default_rng(1)
    truth, covered, trials = 3.0, 0, 2000
    for _ in range(trials):
        counts = rng.integers(5, 60, size=30)
        effects = rng.normal(0.0, 0.3, size=30)
        sums = np.array(
            [rng.normal(truth + e, 1.0, size=n).sum() for e, n in zip(effects, counts, strict=True)]
        )
        found = ratio_interval(sums, counts)
        covered += found.low <= truth <= found.high
    assert 0.93 <= covered / trials <= 0.97


@needs_inkling
def test_a_checkpoint_is_a_whole_model_section(checkpoint, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\ncheckpoint = "{checkpoint.name}"\n[train]\nseq_len = 16\n')
    (tmp_path / checkpoint.name).symlink_to(checkpoint)  # relative to the file's directory
    model = load_config(config).model
    assert model.kind == "transformers" and model.architecture == "Inkling2LoopForCausalLM"
    assert model.checkpoint_depth == NATIVE_DEPTH and model.checkpoint_sha256 is None
    expected = {**TINY, "eos_token_id": 0}
    expected = {k: v for k, v in expected.items() if v is not None and k != "loop_num_passes"}
    assert {k: model.options[k] for k in expected} == expected
    with pytest.raises(UserError, match=r"model.transformers.hidden_size = 64, but the checkpoint"):
        model_section({"checkpoint": str(checkpoint), "transformers": {"hidden_size": 64}})


@needs_inkling
def test_a_runs_record_reads_without_the_checkpoint(checkpoint, tmp_path):
    """config.toml records the checkpoint whole: a run whose checkpoint moved stays readable."""
    from fixedfirst.runs.identity import with_checkpoint_identity

    moved = tmp_path / "moved"
    save_checkpoint(moved)
    raw = {"model": {"checkpoint": str(moved)}, "train": {"seq_len": 16}}
    config = with_checkpoint_identity(RunConfig.from_dict(raw))
    record = config.to_dict()
    for path in moved.iterdir():
        path.unlink()
    moved.rmdir()
    assert RunConfig.from_dict(record).model == config.model
    with pytest.raises(UserError, match="no such directory"):
        with_checkpoint_identity(RunConfig.from_dict(record))


@needs_inkling
def test_a_configuration_as_written_is_the_run_it_recorded(checkpoint, tmp_path):
    """A run records the checksum; the configuration it was started from (without one) still
    names the same run, so that a study or `finish` invoked again reuses it."""
    from fixedfirst.runs.directory import RunDir
    from fixedfirst.train.trainer import Trainer

    raw = {
        "model": {"checkpoint": str(checkpoint)},
        "train": {"seq_len": 16, "batch_size": 2, "tokens": 64, "device": "cpu"},
    }
    config = RunConfig.from_dict(raw)
    Trainer(config, str(tmp_path / "run"), quiet=True).train(stop_after=1)
    RunDir(tmp_path / "run").refuse_other_run(config)
    with pytest.raises(UserError, match=r"different configuration \(train.lr\)"):
        RunDir(tmp_path / "run").refuse_other_run(
            RunConfig.from_dict({**raw, "train": {**raw["train"], "lr": 0.5}})
        )


@needs_inkling
def test_weights_are_checked_whole_and_identified_by_their_bytes(checkpoint, tmp_path):
    copy = tmp_path / "copy"
    save_checkpoint(copy)
    assert len(weight_files(copy)) == len(shards(copy)) > 3
    assert weights_sha256(copy) == weights_sha256(checkpoint)  # the same weights, elsewhere
    last = shards(copy)[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 0x01
    last.write_bytes(bytes(data))  # a flipped bit: the same size
    assert weights_sha256(copy) != weights_sha256(checkpoint)
    last.write_bytes(bytes(data[:-10]))
    with pytest.raises(UserError, match="is truncated"):
        weight_files(copy)
    last.unlink()
    with pytest.raises(UserError, match="is missing: model.safetensors.index.json puts"):
        weight_files(copy)


@needs_inkling
def test_the_loaded_model_is_the_checkpoints(checkpoint):
    from transformers import AutoModelForCausalLM

    model = initial_model(model_section({"checkpoint": str(checkpoint)}))
    stock = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    tokens = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for depth in (1, NATIVE_DEPTH, 5):
            stock.config.loop_num_passes = depth
            assert torch.equal(model(tokens, depth), stock(input_ids=tokens).logits)


@needs_inkling
def test_eval_of_a_checkpoint_directory_and_a_second_set_of_depths(checkpoint, tmp_path):
    (tmp_path / "corpus.txt").write_text(corpus())
    cli("prepare", tmp_path / "corpus.txt", "--out", tmp_path / "data", "--tokenizer", checkpoint)
    out = tmp_path / "profile.json"
    common = ["--data", tmp_path / "data", "--out", out, "--blocks", 6, "--seq-len", 16]
    cli("eval", checkpoint, *common, "--depths", "1,2")
    cli("eval", checkpoint, *common, "--depths", "3,2")
    result = json.loads(out.read_text())
    assert result["depths"] == [1, 2, 3]  # joined, not replaced
    assert result["checkpoint"]["depth"] == NATIVE_DEPTH and result["rows"] == 6
    assert len(result["row_nll"]["1"]) == 6 and result["row_tokens"] == [16] * 6
    for d in ("1", "2", "3"):
        bounds = result["interval_by_depth"][d]
        assert bounds["low"] < result["nll_by_depth"][d] < bounds["high"]
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_our_own_export_is_a_checkpoint_finished_and_handed_back(tmp_path):
    """A run of our looped transformer trained at depth 3, exported with --format hf, is read
    into our model with the run's weights, finished, and handed back as an export again."""
    from fixedfirst.data.prepare import PrepareOptions, prepare
    from fixedfirst.runs.opening import load_run
    from fixedfirst.train.trainer import Trainer
    from tests.test_checkpoint_finish import assert_same_logits
    from tests.trainer_helpers import TINY_TOML

    (tmp_path / "corpus.txt").write_text(corpus())
    prepare([str(tmp_path / "corpus.txt")], tmp_path / "bytes", PrepareOptions(separator="%"))
    toml = TINY_TOML.replace("vocab_size = 48", "vocab_size = 257").replace(
        'kind = "fixed-first"', 'kind = "fixed"\ndepth = 3'
    )
    toml = toml.replace("k0 = 2\nswitch = 0.5\nk_max = 6\n", "")
    (tmp_path / "own.toml").write_text(toml + '\n[data]\nkind = "tokens"\npath = "bytes"\n')
    Trainer(
        load_config(tmp_path / "own.toml", ["train.tokens=512"]), str(tmp_path / "own"), quiet=True
    ).train()
    export = tmp_path / "export"
    cli("export", tmp_path / "own", "--format", "hf", "--out", export)
    section = model_section({"checkpoint": str(export)})
    assert section.checkpoint_depth == 3
    ours = initial_model(section)
    run = load_run(tmp_path / "own").model
    assert all(
        torch.equal(a, b)
        for a, b in zip(ours.state_dict().values(), run.state_dict().values(), strict=True)
    )
    assert torch.equal(ours.eval_state, run.eval_state)
    data = tmp_path / "data"
    cli(
        "prepare", tmp_path / "corpus.txt", "--out", data, "--tokenizer", export, "--separator", "%"
    )
    out = tmp_path / "finish"
    cli(
        "finish",
        export,
        "--data",
        data,
        "--out",
        out,
        "--tokens",
        256,
        "--k-max",
        4,
        "--set",
        "train.batch_size=4",
        "--set",
        "train.seq_len=16",
        "--set",
        "train.lr=3e-3",
        "--set",
        "eval.batches=1",
        "--set",
        "train.device=cpu",
    )
    handed_back = tmp_path / "handed-back"
    cli("export", out / "finished", "--format", "checkpoint", "--out", handed_back)
    assert json.loads((handed_back / "config.json").read_text())["depth"] == 3
    assert "finished for depths 1..4" in (handed_back / "README.md").read_text()
    assert_same_logits(out / "finished", handed_back, tmp_path, key="depth", remote=True)
