"""Serving a run: `fixedfirst generate` (fixed depth, KL exit, streaming), `fixedfirst export` and
`fixedfirst.load`, the tokenizers of byte and bios runs, and the refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fixedfirst
from fixedfirst.cli.main import main
from fixedfirst.data.tokenizer import load_tokenizer
from fixedfirst.runs.served import load_served
from fixedfirst.runs.tokenizer import run_tokenizer
from fixedfirst.serve import Adaptive, KLExit, Sampling, stream_kl_exit
from fixedfirst.serve.generation import IncrementalDecoder
from tests.trainer_helpers import tiny_config

EOD = 256


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def snapshot(directory: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(directory.rglob("*"))
    }


def expected_text(new_ids: list[int]) -> str:
    new_ids = new_ids[: new_ids.index(EOD)] if EOD in new_ids else new_ids
    return bytes(new_ids).decode("utf-8", errors="replace").rstrip("\ufffd")


@pytest.fixture(scope="module")
def served(text_run):
    return load_served(text_run / "run")


def test_generate_at_fixed_depth_streams_the_greedy_continuation(text_run, served, capsys):
    code, out, err = run_cli(
        capsys,
        "generate",
        text_run / "run",
        "--prompt",
        "the river",
        "--depth",
        "3",
        "--max-new-tokens",
        "30",
    )
    assert code == 0
    prompt = torch.tensor([[EOD, *b"the river"]])
    new = served.model.generate(prompt, 30, 3)[0, prompt.shape[1] :].tolist()
    assert out == expected_text(new) + "\n"
    assert "depth 3" in err and "tokens/s" in err


def test_generate_with_kl_exit_reports_the_mean_depth(text_run, served, capsys):
    code, out, err = run_cli(
        capsys,
        "generate",
        text_run / "run",
        "--prompt",
        "the lamp",
        "--exit",
        "kl",
        "--threshold",
        "1e-2",
        "--max-depth",
        "5",
        "--max-new-tokens",
        "25",
    )
    assert code == 0
    prompt = torch.tensor([[EOD, *b"the lamp"]])
    steps = list(stream_kl_exit(served.model, prompt, 25, Adaptive(KLExit(1e-2, 5))))
    ids = [int(t) for t, _ in steps]
    n = ids.index(EOD) if EOD in ids else len(ids)
    depths = [int(d) for _, d in steps][:n]
    assert out == expected_text(ids) + "\n"
    assert f"mean depth {sum(depths) / len(depths):.2f}" in err
    assert "KL exit (threshold 0.01, max depth 5)" in err


def test_speculate_prints_the_plain_greedy_text(text_run, capsys):
    args = ["generate", text_run / "run", "--prompt", "the river", "--max-new-tokens", "40"]
    code, plain, _ = run_cli(capsys, *args, "--depth", "6")
    assert code == 0
    code, drafted, err = run_cli(capsys, *args, "--speculate", "2:3")
    assert code == 0 and drafted == plain
    assert "depth 6, speculating 3 tokens at depth 2: " in err and "% accepted (" in err


@pytest.mark.parametrize("extra", [["--depth", "4"], ["--exit", "argmax", "--threshold", "2"]])
def test_several_prompts_decode_as_one_batch(text_run, served, capsys, extra):
    prompts = ["the river", "a", "quartz lamp"]
    args = [a for p in prompts for a in ("--prompt", p)]
    code, out, err = run_cli(
        capsys, "generate", text_run / "run", *args, *extra, "--max-new-tokens", "12"
    )
    assert code == 0 and "from 3 prompts in one batch" in err
    expected = ""
    for number, prompt in enumerate(prompts, 1):
        alone = run_cli(
            capsys,
            "generate",
            text_run / "run",
            "--prompt",
            prompt,
            *extra,
            "--max-new-tokens",
            "12",
        )[1]
        expected += f"--- {number}: {prompt!r}\n{alone}"
    assert out == expected


def test_default_depth_is_the_deepest_training_depth(text_run, capsys):
    code, _, err = run_cli(
        capsys, "generate", text_run / "run", "--prompt", "a", "--max-new-tokens", "3"
    )
    assert code == 0 and "depth 6" in err  # the run's schedule: fixed-first up to k_max = 6


def test_incremental_decoder_holds_back_incomplete_characters(served):
    decoder = IncrementalDecoder(served.tokenizer)
    pieces = [decoder.push(b) for b in "é!".encode()]
    assert pieces == ["", "é", "!"]


def test_sampling_is_seeded(text_run, served, capsys):
    args = ["generate", text_run / "run", "--prompt", "the", "--temperature", "1.0", "--exit", "kl"]
    assert run_cli(capsys, *args, "--seed", "5")[1] == run_cli(capsys, *args, "--seed", "5")[1]
    prompt = torch.tensor([[EOD, *b"the"]])

    def sample(seed: int) -> list[int]:
        mode = Adaptive(KLExit(1e-2, 4), Sampling(1.0, seed))
        return [int(token) for token, _ in stream_kl_exit(served.model, prompt, 30, mode)]

    assert sample(5) == sample(5) != sample(6)


def test_export_round_trip(text_run, served, tmp_path, capsys):
    out = tmp_path / "export"
    code, stdout, _ = run_cli(capsys, "export", text_run / "run", "--out", out)
    assert code == 0 and "fixedfirst.load" in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["format"] == "fixedfirst-export" and config["default_depth"] == 6
    assert config["tokenizer"]["kind"] == "byte" and config["tokenizer"]["stop_id"] == EOD
    assert config["source"]["step"] == served.run.checkpoint.step
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer",
    ]
    model = fixedfirst.load(out)
    assert not model.training
    x = torch.randint(0, 257, (2, 40))
    for depth in (1, 3, 9):
        torch.testing.assert_close(model(x, depth), served.model(x, depth), rtol=0, atol=0)
    # Generation from the export equals generation from the run.
    args = ["--prompt", "the harbor", "--depth", "4", "--max-new-tokens", "20"]
    assert (
        run_cli(capsys, "generate", out, *args)[1]
        == run_cli(capsys, "generate", text_run / "run", *args)[1]
    )


def test_export_into_an_empty_directory(text_run, tmp_path, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    assert run_cli(capsys, "export", text_run / "run", "--out", out, "--checkpoint", "8")[0] == 0
    assert (out / "model.safetensors").is_file()


def test_bios_run_tokenizer_and_its_export(tmp_path):
    from fixedfirst.config import load_config
    from fixedfirst.data.registry import kind_options
    from fixedfirst.tasks.bios import BiosTokenizer, build_pools

    preset = Path(fixedfirst.__file__).parent / "studies" / "bios" / "presets" / "smoke.toml"
    text = preset.read_text()
    text = text[text.index("[data]") :]  # the run sections, not [experiment]
    (tmp_path / "bios.toml").write_text(text + '\n[schedule]\nkind = "fixed"\ndepth = 3\n')
    config = load_config(tmp_path / "bios.toml")
    tokenizer = run_tokenizer(config)
    words = BiosTokenizer.for_pools(build_pools(kind_options(config), config.data.seed))
    assert tokenizer.kind == "words" and tokenizer.vocab_size == words.vocab_size
    assert (tokenizer.start_id, tokenizer.stop_id) == (words.bos_id, words.eos_id)
    tokenizer.save(tmp_path / "tok")
    again = load_tokenizer(tmp_path / "tok")
    sentence = " ".join(words.vocab[3:12])
    assert again.encode(sentence) == tokenizer.encode(sentence)
    assert again.decode(again.encode(sentence)) == sentence


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    from fixedfirst.train.trainer import Trainer

    run = tmp_path_factory.mktemp("synthetic") / "run"
    Trainer(tiny_config(), str(run), quiet=True).train(stop_after=4)
    return run


BAD = [
    (["--depth", "0"], "depth must be an integer >= 1"),
    (["--exit", "kl", "--threshold", "-1"], "threshold must be a finite number >= 0"),
    (["--exit", "kl", "--threshold", "nan"], "threshold must be a finite number >= 0"),
    (["--exit", "kl", "--max-depth", "0"], "depth must be an integer >= 1"),
    (["--exit", "kl", "--depth", "4"], "not both"),
    (["--threshold", "0.01"], "go with --exit RULE"),
    (["--exit", "latent"], "--exit 'latent': unknown exit rule; choose one of kl, entropy"),
    (["--exit", "argmax", "--threshold", "1"], "argmax threshold"),
    (["--exit", "state", "--threshold", "inf"], "state-change threshold must be a finite"),
    (["--speculate", "6"], "draft depth must be below the serving depth, got draft depth 6 and"),
    (["--speculate", "2", "--depth", "2"], "--speculate 2:4: the draft depth must be below"),
    (["--speculate", "2:0"], "--speculate 2:0: the number of draft tokens must be an integer"),
    (["--speculate", "two"], "--speculate 'two': expected DRAFT_DEPTH[:N_TOKENS]"),
    (["--speculate", "2", "--exit", "kl"], "give either --speculate"),
    (["--speculate", "2", "--temperature", "0.5"], "--speculate decodes greedily"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--temperature", "-1"], "--temperature must be 0 (greedy) or in [0.0001, 100], got -1.0"),
    (["--max-new-tokens", "60"], "at most 54 new tokens fit"),
    (["--checkpoint", "3"], "step"),
]


@pytest.mark.parametrize(("extra", "fragment"), BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_generate_input_is_one_line(text_run, capsys, extra, fragment):
    before = snapshot(text_run)
    code, _, err = run_cli(capsys, "generate", text_run / "run", "--prompt", "the river", *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("fixedfirst generate: error: ") and fragment in err
    assert snapshot(text_run) == before


def test_generate_without_max_new_tokens_fills_the_window(text_run, served, capsys):
    # The run's window is 64 tokens; "the river" takes 10 with the start token, so 54 fit.
    code, out, err = run_cli(capsys, "generate", text_run / "run", "--prompt", "the river")
    assert code == 0, err
    prompt = torch.tensor([[EOD, *b"the river"]])
    new = served.model.generate(prompt, 54, served.default_depth)[0, prompt.shape[1] :].tolist()
    assert out == expected_text(new) + "\n"
    assert err.count("tokens,") == 1 and ("54 tokens" in err or EOD in new)


def test_prompt_longer_than_the_window(text_run, capsys):
    code, _, err = run_cli(capsys, "generate", text_run / "run", "--prompt", "x" * 64)
    assert code == 2 and "longer than model.max_seq_len = 64" in err


def test_synthetic_run_has_no_tokenizer(synthetic_run, capsys):
    code, _, err = run_cli(capsys, "generate", synthetic_run, "--prompt", "hello")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'synthetic'" in err


def test_export_refuses_a_non_empty_directory(text_run, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    code, _, err = run_cli(capsys, "export", text_run / "run", "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not empty" in err
    assert snapshot(tmp_path) == before


def test_load_takes_a_run_and_refuses_what_is_neither_run_nor_export(text_run):
    from fixedfirst.runs.served import load_served

    model = fixedfirst.load(text_run / "run")  # like load_served: the newest checkpoint
    served = load_served(text_run / "run").model.state_dict()
    assert all(torch.equal(v, served[k]) for k, v in model.state_dict().items())
    with pytest.raises(fixedfirst.UserError, match="not an export"):
        fixedfirst.load(text_run / "data")
