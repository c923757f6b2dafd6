"""Serving a Hugging Face checkpoint directory of a looped architecture (runs/served.py): a tiny
Inkling2Loop written by stock transformers' save_pretrained (tests/checkpoint_helpers.py) is
decoded by `fixedfirst generate` as transformers' own generate decodes it at the same number of
loop passes; speculated at a shallow draft depth it gives the verify depth's tokens; without
--depth it serves at the passes the checkpoint was trained at; `inspect` scores it as its own
forward does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.cli.main import main
from fixedfirst.runs.served import load_served
from fixedfirst.serve.generation import generate_text, prompt_ids
from fixedfirst.serve.modes import FixedDepth, Sampling
from tests.checkpoint_helpers import NATIVE_DEPTH, save_checkpoint, transformers_tokens
from tests.inkling_helpers import needs_inkling

pytestmark = needs_inkling

PROMPT = "the river stone"
NEW = 10


def run_cli(capsys, *argv: object) -> tuple[str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert info.value.code == 0, captured.err
    return captured.out, captured.err


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "ckpt")


def test_generate_at_a_fixed_depth_is_transformers_generate_at_those_passes(checkpoint, capsys):
    served = load_served(checkpoint)
    assert served.default_depth == NATIVE_DEPTH
    assert served.tokenizer is not None
    prompt = prompt_ids(served, PROMPT)
    seen = set()
    for depth in (1, NATIVE_DEPTH, 5):
        mode = FixedDepth(depth, Sampling(0.0, 0))
        steps = list(generate_text(served, PROMPT, NEW, mode))
        reference = transformers_tokens(checkpoint, prompt, depth, served.tokenizer.stop_id, NEW)
        assert [s.token for s in steps] == reference
        assert len(reference) >= 3  # enough tokens to tell the depths apart
        seen.add(tuple(reference))
        out, err = run_cli(
            capsys, "generate", checkpoint, "--prompt", PROMPT, "--depth", depth,
            "--max-new-tokens", NEW,
        )  # fmt: skip
        assert out == "".join(s.text for s in steps) + "\n"
        assert f"depth {depth}, full cache" in err
        assert f"checkpoint trained at depth {NATIVE_DEPTH}" in err
    assert len(seen) > 1  # the depth is applied: not every depth decodes alike


def test_without_depth_it_serves_at_the_trained_passes(checkpoint, capsys):
    args = ["--prompt", PROMPT, "--max-new-tokens", NEW]
    default, err = run_cli(capsys, "generate", checkpoint, *args)
    assert f"depth {NATIVE_DEPTH}, full cache" in err
    native, _ = run_cli(capsys, "generate", checkpoint, *args, "--depth", NATIVE_DEPTH)
    assert default == native


def test_speculated_tokens_are_the_verify_depths(checkpoint, capsys):
    args = ["--prompt", PROMPT, "--max-new-tokens", NEW, "--depth", 4]
    plain, _ = run_cli(capsys, "generate", checkpoint, *args)
    speculated, err = run_cli(capsys, "generate", checkpoint, *args, "--speculate", "1:3")
    assert speculated == plain
    assert "speculating 3 tokens at depth 1:" in err and "accepted" in err


def test_inspect_scores_each_depth_as_the_model_does(checkpoint, capsys, tmp_path):
    out, _ = run_cli(
        capsys, "inspect", checkpoint, "--prompt", PROMPT, "--depths", "1,3",
        "--out", tmp_path / "page.html",
    )  # fmt: skip
    served = load_served(checkpoint)
    ids = torch.tensor([prompt_ids(served, PROMPT)])
    for depth in (1, 3):
        nll = F.cross_entropy(served.model(ids[:, :-1], depth)[0], ids[0, 1:]).item()
        assert f"| {depth} | {nll:.4f} |" in out


def test_our_own_hf_export_serves_as_its_run_does(tmp_path, capsys):
    """`export --format hf` of our looped transformer is a checkpoint directory too: served from
    it (our model, its tokenizer read by transformers), it decodes what the run decodes, by
    default at the depth the run trained at."""
    from fixedfirst.config import load_config
    from fixedfirst.data.prepare import PrepareOptions, prepare
    from fixedfirst.train.trainer import Trainer
    from tests.checkpoint_helpers import corpus
    from tests.trainer_helpers import TINY_TOML

    (tmp_path / "corpus.txt").write_text(corpus())
    prepare([str(tmp_path / "corpus.txt")], tmp_path / "bytes", PrepareOptions(separator="%"))
    toml = TINY_TOML.replace("vocab_size = 48", "vocab_size = 257").replace(
        'kind = "fixed-first"', 'kind = "fixed"\ndepth = 3'
    )
    toml = toml.replace("k0 = 2\nswitch = 0.5\nk_max = 6\n", "")
    (tmp_path / "own.toml").write_text(toml + '\n[data]\nkind = "tokens"\npath = "bytes"\n')
    config = load_config(tmp_path / "own.toml", ["train.tokens=512"])
    Trainer(config, str(tmp_path / "own"), quiet=True).train()
    export = tmp_path / "export"
    run_cli(capsys, "export", tmp_path / "own", "--format", "hf", "--out", export)
    args = ["--prompt", "the river", "--max-new-tokens", NEW]
    for depth in (["--depth", 1], []):
        from_run, _ = run_cli(capsys, "generate", tmp_path / "own", *args, *depth)
        from_export, err = run_cli(capsys, "generate", export, *args, *depth)
        assert from_export == from_run
    assert "depth 3, full cache" in err
