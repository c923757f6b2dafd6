"""`fixedfirst export --format hf`: the export loads with transformers alone (in this process,
and in a fresh one: `slow`), and gives fixedfirst's logits at depths 1, 4, 16, its greedy and
sampled tokens, and its lm-eval scores; the tokenizers of byte, BPE and word-level runs encode
as fixedfirst's do."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.data.tokenizer import BpeTokenizer, WordTokenizer
from fixedfirst.export.hf.tokenizer import hf_tokenizer_files
from fixedfirst.runs.served import load_served

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
"""Found, not imported: the tests import it (a second of CPU) in the worker that runs them."""

ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "tests" / "harness_task"
EOD = 256
LOGITS_ATOL = 1e-5
"""How far the export's fp32 logits may be from fixedfirst's: transformers may order the sums
differently, so they agree to rounding, not bit for bit (the HF guide says so)."""
PROMPT = "the river"

FRESH_PROCESS = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
directory, work = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(directory)
x = torch.load(work + "/x.pt")
out = {"training": model.training, "depth": model.config.depth}
out["logits"] = {k: model(x, depth=k).logits for k in (1, 4, 16)}
prompt = tokenizer("the river", return_tensors="pt")
out["prompt"] = prompt.input_ids
out["greedy"] = model.generate(**prompt, max_new_tokens=30, depth=3)
torch.manual_seed(7)
out["sampled"] = model.generate(
    **prompt, max_new_tokens=30, depth=3, do_sample=True, temperature=0.8, top_k=0
)
torch.save(out, work + "/hf.pt")
"""


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.fixture(scope="module")
def exported(text_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "export"
    with pytest.raises(SystemExit) as info:
        main(["export", str(text_run / "run"), "--out", str(out), "--format", "hf"])
    assert info.value.code == 0
    return out


@pytest.fixture(scope="module")
def hf_model(exported):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(exported, trust_remote_code=True)


@pytest.fixture(scope="module")
def served(text_run):
    return load_served(text_run / "run")


def new_tokens(ids: torch.Tensor, prompt_length: int) -> list[int]:
    tokens = ids[0, prompt_length:].tolist()
    return tokens[: tokens.index(EOD)] if EOD in tokens else tokens


def test_every_exported_file_is_readable_by_others(text_run, tmp_path):
    """safetensors creates its file 0600; on a shared system others must load the export."""
    old = os.umask(0o022)
    try:
        with pytest.raises(SystemExit) as info:
            main(["export", str(text_run / "run"), "--out", str(tmp_path / "e"), "--format", "hf"])
    finally:
        os.umask(old)
    assert info.value.code == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "e").iterdir()}
    assert modes["model.safetensors"] == 0o644
    assert set(modes.values()) == {0o644}


def test_export_writes_a_self_contained_transformers_directory(exported):
    assert sorted(p.name for p in exported.iterdir()) == [
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "modeling_fixedfirst.py",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "fixedfirst" and config["depth"] == 6  # k_max of the run
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_fixedfirst.FixedFirstForCausalLM"
    assert (config["bos_token_id"], config["eos_token_id"]) == (EOD, EOD)
    imported = set()
    for node in ast.walk(ast.parse((exported / "modeling_fixedfirst.py").read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported == {"__future__", "math", "torch", "transformers"}


def assert_fixedfirst_logits_and_tokens(out, x, text_run, served, capsys) -> None:
    """What transformers computed (`out`, as FRESH_PROCESS saves it) is fixedfirst's: logits at
    depths 1, 4, 16 within LOGITS_ATOL, greedy and seeded sampled tokens equal to `fixedfirst
    generate`'s."""
    assert out["training"] is False and out["depth"] == 6
    for depth, logits in out["logits"].items():
        diff = (logits - served.model(x, depth)).abs().max().item()
        assert diff <= LOGITS_ATOL, (depth, diff)
    prompt = out["prompt"]
    assert prompt.tolist() == [[EOD, *PROMPT.encode()]]
    n = prompt.shape[1]
    greedy = new_tokens(out["greedy"], n)
    assert greedy == new_tokens(served.model.generate(prompt, 30, 3), n)
    args = ["generate", text_run / "run", "--prompt", PROMPT, "--max-new-tokens", "30"]
    text = run_cli(capsys, *args, "--depth", "3")[1]
    assert text == bytes(greedy).decode("utf-8", errors="replace").rstrip("\ufffd") + "\n"
    sampled = new_tokens(out["sampled"], n)
    text = run_cli(capsys, *args, "--depth", "3", "--temperature", "0.8", "--seed", "7")[1]
    assert text == bytes(sampled).decode("utf-8", errors="replace").rstrip("\ufffd") + "\n"
    assert sampled != greedy


def test_the_guide_claims_what_these_tests_check():
    """The HF guide said the export's logits equal fixedfirst's "to the last bit"; on a BPE model
    at transformers 5.25 they differed by up to 3.3e-6 (issue 57). What holds, and what the tests
    check, is the tolerance and identical greedy and sampled tokens: the guide says that."""
    guide = " ".join((ROOT / "docs" / "guides" / "huggingface.md").read_text().split())
    assert "last bit" not in guide
    tolerance = f"{LOGITS_ATOL:.0e}".replace("e-0", "e-")  # 1e-5
    assert f"within {tolerance} in fp32" in guide
    assert "the same greedy tokens" in guide


def test_transformers_gives_fixedfirst_logits_and_tokens(
    hf_model, exported, text_run, served, capsys
):
    """FRESH_PROCESS's calls, in this process on the module's loaded model: what the test
    below checks in a new interpreter (marked slow: 7 s of CPU importing transformers and
    loading the model there)."""
    from transformers import AutoTokenizer

    x = torch.randint(0, 257, (2, 40), generator=torch.Generator().manual_seed(0))
    tokenizer = AutoTokenizer.from_pretrained(exported)  # as FRESH_PROCESS: no remote code
    capsys.readouterr()  # its question about the config's code, answered no
    out = {"training": hf_model.training, "depth": hf_model.config.depth}
    out["logits"] = {k: hf_model(x, depth=k).logits for k in (1, 4, 16)}
    prompt = tokenizer(PROMPT, return_tensors="pt")
    out["prompt"] = prompt.input_ids
    out["greedy"] = hf_model.generate(**prompt, max_new_tokens=30, depth=3)
    torch.manual_seed(7)
    out["sampled"] = hf_model.generate(
        **prompt, max_new_tokens=30, depth=3, do_sample=True, temperature=0.8, top_k=0
    )
    assert_fixedfirst_logits_and_tokens(out, x, text_run, served, capsys)


@pytest.mark.slow
def test_fresh_process_gives_fixedfirst_logits_and_tokens(
    exported, text_run, served, tmp_path, capsys
):
    """transformers alone, in a new interpreter: logits at depths 1, 4, 16 within 1e-5 of
    fixedfirst's model; greedy and seeded sampled tokens equal to `fixedfirst generate`'s."""
    x = torch.randint(0, 257, (2, 40), generator=torch.Generator().manual_seed(0))
    torch.save(x, tmp_path / "x.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(exported), str(tmp_path)],
        check=True,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,  # AutoTokenizer asks about the config's code when interactive
        capture_output=True,
    )
    assert_fixedfirst_logits_and_tokens(torch.load(tmp_path / "hf.pt"), x, text_run, served, capsys)


def test_serving_depth_from_the_config_or_per_call(hf_model, served):
    x = torch.randint(0, 257, (1, 20), generator=torch.Generator().manual_seed(1))
    assert hf_model.config.depth == 6
    try:
        hf_model.config.depth = 2
        torch.testing.assert_close(hf_model(x).logits, served.model(x, 2), rtol=0, atol=1e-5)
    finally:
        hf_model.config.depth = 6
    torch.testing.assert_close(hf_model(x, depth=5).logits, served.model(x, 5), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        hf_model(x, depth=0)


def test_depth_is_capped_as_in_fixedfirst(hf_model):
    from fixedfirst.config.limits import MAX_DEPTH
    from fixedfirst.export.hf import modeling_fixedfirst

    assert modeling_fixedfirst.MAX_DEPTH == MAX_DEPTH  # the file cannot import fixedfirst
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=f"depth must be <= MAX_DEPTH = {MAX_DEPTH}"):
        hf_model(x, depth=MAX_DEPTH + 1)
    try:
        hf_model.config.depth = 100_000  # as if config.json said so
        with pytest.raises(ValueError, match="got 100000"):
            hf_model(x)
        with pytest.raises(ValueError, match="got 100000"):
            hf_model.generate(x, max_new_tokens=2)
    finally:
        hf_model.config.depth = 6


def test_generation_past_the_positions_is_refused_before_the_first_token(hf_model):
    limit = hf_model.config.max_position_embeddings
    prompt = torch.full((1, limit - 5), 3, dtype=torch.long)
    calls = []
    hook = hf_model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        message = f"generating up to {limit + 1} positions .* ask for at most 5 new tokens"
        with pytest.raises(ValueError, match=message):
            hf_model.generate(prompt, max_new_tokens=6, depth=2)
        assert calls == []  # nothing was computed
        out = hf_model.generate(prompt, max_new_tokens=5, depth=2, do_sample=False)
    finally:
        hook.remove()
    assert out.shape[1] == limit and len(calls) == 5


def test_labels_give_fixedfirst_next_token_loss(hf_model, served):
    from fixedfirst.model.loss import IGNORE_INDEX, next_token_loss

    ids = torch.randint(0, 257, (2, 24), generator=torch.Generator().manual_seed(2))
    labels = ids.clone()
    labels[0, :5] = IGNORE_INDEX  # a prompt that is not scored
    loss = hf_model(ids, labels=labels, depth=4).loss
    want = next_token_loss(served.model(ids[:, :-1], 4), labels[:, 1:])
    torch.testing.assert_close(loss, want, rtol=0, atol=1e-5)
    scored = int((labels[:, 1:] != IGNORE_INDEX).sum())
    summed = hf_model(ids, labels=labels, depth=4, num_items_in_batch=2 * scored).loss
    torch.testing.assert_close(summed, want / 2, rtol=0, atol=1e-5)
    with pytest.raises(TypeError, match="unexpected arguments"):
        hf_model(ids, depth=4, token_type_ids=torch.zeros_like(ids))


def test_left_padded_batch_generates_what_each_prompt_does_alone(hf_model, exported):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(exported, trust_remote_code=True)
    tokenizer.padding_side = "left"
    prompts = ["the river", "a", "the cedar stone lamp"]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    assert not bool(batch.attention_mask.all())
    together = hf_model.generate(**batch, max_new_tokens=10, depth=4)
    width = batch.input_ids.shape[1]
    for row, prompt in enumerate(prompts):
        alone = tokenizer(prompt, return_tensors="pt")
        single = hf_model.generate(**alone, max_new_tokens=10, depth=4)
        assert together[row, width:].tolist() == single[0, alone.input_ids.shape[1] :].tolist()
    recomputed = hf_model.generate(**batch, max_new_tokens=10, depth=4, use_cache=False)
    assert recomputed.tolist() == together.tolist()


def test_the_cache_holds_one_entry_per_layer_application(hf_model):
    from transformers.cache_utils import DynamicCache

    ids = torch.tensor([[EOD, *b"the river"]])
    out = hf_model(ids, depth=3, use_cache=True)
    cache = out.cache if "cache" in out else out.past_key_values
    assert isinstance(cache, DynamicCache)
    config = hf_model.config
    assert len(cache.layers) == config.n_prelude + config.n_coda + 3 * config.n_core
    assert cache.get_seq_length() == ids.shape[1]
    step = hf_model(torch.tensor([[ord("s")]]), depth=3, cache=cache).logits
    whole = hf_model(torch.tensor([[EOD, *b"the rivers"]]), depth=3, use_cache=False).logits
    torch.testing.assert_close(step[0, -1], whole[0, -1], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="built at depth 3; it cannot be continued at depth 4"):
        hf_model(torch.tensor([[ord("x")]]), depth=4, cache=cache)


def hf_teacher_forced(hf_model, ids: torch.Tensor, prefill: int, **kwargs) -> torch.Tensor:
    """Logits of every position of `ids`: the first `prefill` in one call, then one per call."""
    out = hf_model(ids[:, :prefill], use_cache=True, **kwargs)
    cache = out.cache if "cache" in out else out.past_key_values
    logits = [out.logits]
    for t in range(prefill, ids.shape[1]):
        logits.append(hf_model(ids[:, t : t + 1], cache=cache, **kwargs).logits)
    return torch.cat(logits, 1)


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_a_bounded_cache_decodes_as_fixedfirst_does(hf_model, served, slots):
    """cache_slots = S is fixedfirst's bounded:S (last at 1): the same logits, token by token,
    as fixedfirst's decoding through that cache, which differ from the full cache's; generate
    gives fixedfirst's tokens, with min(depth, S) core slots per layer in its cache."""
    from fixedfirst.model import BoundedCache
    from fixedfirst.serve.decoding import teacher_forced
    from fixedfirst.serve.modes import FixedDepth

    ids = torch.tensor([[EOD, *b"the river stone lamp"]])
    mine = hf_teacher_forced(hf_model, ids, 4, depth=5, cache_slots=slots)
    ours, _ = teacher_forced(
        served.model, ids, FixedDepth(5, cache_strategy=BoundedCache(slots)), 4
    )
    torch.testing.assert_close(mine, ours, rtol=0, atol=1e-5)
    full = hf_teacher_forced(hf_model, ids, 4, depth=5)
    assert (mine[:, 4:] - full[:, 4:]).abs().amax() > 1e-4  # ten times the tolerance above
    prompt = torch.tensor([[EOD, *b"the river"]])
    out = hf_model.generate(prompt, max_new_tokens=12, depth=5, cache_slots=slots)
    want = served.model.generate(prompt, 12, 5, cache_strategy=BoundedCache(slots))
    assert new_tokens(out, prompt.shape[1]) == new_tokens(want, prompt.shape[1])
    step = hf_model(prompt, depth=5, cache_slots=slots, use_cache=True)
    cache = step.cache if "cache" in step else step.past_key_values
    config = hf_model.config
    assert len(cache.layers) == config.n_prelude + config.n_coda + min(5, slots) * config.n_core
    with pytest.raises(ValueError, match=f"built with cache_slots = {slots}; it cannot be"):
        hf_model(torch.tensor([[ord("x")]]), depth=5, cache=cache)


def test_a_bounded_padded_batch_generates_what_each_prompt_does_alone(hf_model, exported):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(exported, trust_remote_code=True)
    tokenizer.padding_side = "left"
    prompts = ["the river", "a", "the cedar stone lamp"]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    together = hf_model.generate(**batch, max_new_tokens=10, depth=5, cache_slots=2)
    width = batch.input_ids.shape[1]
    for row, prompt in enumerate(prompts):
        alone = tokenizer(prompt, return_tensors="pt")
        single = hf_model.generate(**alone, max_new_tokens=10, depth=5, cache_slots=2)
        assert together[row, width:].tolist() == single[0, alone.input_ids.shape[1] :].tolist()


def test_the_exported_default_cache_and_bad_slots(text_run, tmp_path, hf_model, capsys):
    """`export --format hf --cache last` writes cache_slots 1, which generation then uses; an S
    that is no number of slots is refused by the model, before the first token."""
    from transformers import AutoModelForCausalLM

    code, out, _ = run_cli(
        capsys, "export", text_run / "run", "--out", tmp_path / "e", "--format", "hf",
        "--cache", "last",
    )  # fmt: skip
    assert code == 0 and "last-iteration cache" in out
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert config["cache_slots"] == 1
    last = AutoModelForCausalLM.from_pretrained(tmp_path / "e", trust_remote_code=True)
    prompt = torch.tensor([[EOD, *b"the river"]])
    assert last.generate(prompt, max_new_tokens=8).tolist() == (
        hf_model.generate(prompt, max_new_tokens=8, cache_slots=1).tolist()
    )
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="cache_slots must be None .* or an integer >= 1"):
            hf_model.generate(prompt, max_new_tokens=2, cache_slots=bad)


def test_stock_lm_eval_hf_model_equals_the_fixedfirst_model(exported, text_run, monkeypatch):
    """lm-eval's own `hf` model on the offline task, serving depth 3 from model_args, scores every
    choice as our `fixedfirst` lm-eval model does."""
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("accelerate")
    from lm_eval.tasks import TaskManager

    from fixedfirst.harness.model import FixedFirstLM

    monkeypatch.chdir(ROOT)  # the task's data_files path is relative to the repository root
    task = "fixedfirst_tiny_mc"
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    common = dict(tasks=[task], task_manager=manager, log_samples=True)
    hf = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={exported},trust_remote_code=True,depth=3",
        device="cpu",
        batch_size=4,
        **common,
    )
    ours = lm_eval.simple_evaluate(
        model=FixedFirstLM(str(text_run / "run"), depth=3, device="cpu"), **common
    )

    def scores(out):
        return [[resp[0][0] for resp in s["resps"]] for s in out["samples"][task]]

    for a, b in zip(scores(hf), scores(ours), strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    for metric in ("acc,none", "acc_norm,none"):
        assert hf["results"][task][metric] == ours["results"][task][metric]


def load_tokenizer_files(tokenizer, directory: Path):
    from transformers import PreTrainedTokenizerFast

    directory.mkdir()
    for name, text in hf_tokenizer_files(tokenizer, 128).items():
        (directory / name).write_text(text)
    return PreTrainedTokenizerFast.from_pretrained(directory)


def test_bpe_tokenizer_encodes_and_decodes_as_fixedfirst(tmp_path):
    pytest.importorskip("tokenizers")
    texts = ["the river runs past the stone lamp", "caf\u00e9 \u65e5\u672c harbor"] * 20
    ours = BpeTokenizer.train(texts, 300)
    theirs = load_tokenizer_files(ours, tmp_path / "bpe")
    for text in ["the harbor caf\u00e9", "x <|endoftext|> y\n\t", "\u65e5\u672c\u8a9e"]:
        ids = theirs(text).input_ids
        assert ids == [ours.start_id, *ours.encode(text)]
        assert theirs.decode(ids[1:]) == ours.decode(ids[1:])
    assert theirs.eos_token_id == ours.stop_id and theirs.bos_token_id == ours.start_id


def test_word_tokenizer_encodes_and_decodes_as_fixedfirst(tmp_path):
    pytest.importorskip("tokenizers")
    ours = WordTokenizer(["Anya", "was", "born", "in", "Lisbon", "."])
    theirs = load_tokenizer_files(ours, tmp_path / "words")
    text = "Anya was  born in\nLisbon ."
    ids = theirs(text).input_ids
    assert ids == [ours.bos_id, *ours.encode(text)]
    assert theirs.decode(ids[1:]) == ours.decode(ids[1:]) == "Anya was born in Lisbon ."
    assert (theirs.pad_token_id, theirs.bos_token_id, theirs.eos_token_id) == (0, 1, 2)


def test_missing_tokenizers_package_is_one_line(monkeypatch, served):
    from fixedfirst.errors import UserError

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(UserError, match=r"pip install 'fixedfirst\[hf\]'"):
        hf_tokenizer_files(served.tokenizer, 64)


@pytest.mark.parametrize(
    "overrides",
    [
        {"norm": "sandwich", "coda_norm": False, "injection": "add", "state_init": "zeros"},
        {"mlp": "gelu", "tie_embeddings": True, "n_prelude": 0},
    ],
)
def test_every_architecture_switch_gives_fixedfirst_logits(overrides):
    """Built straight from the config, the HF model with fixedfirst's weights equals
    fixedfirst's model at several depths, whatever the switches."""
    import importlib.util

    from fixedfirst.config import ModelConfig
    from fixedfirst.export.hf import export as hf_export
    from fixedfirst.model import LoopedTransformer

    spec = importlib.util.spec_from_file_location(
        "modeling_fixedfirst", Path(hf_export.__file__).with_name("modeling_fixedfirst.py")
    )
    modeling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(modeling)
    shape = ModelConfig(vocab_size=40, d_model=32, n_heads=4, max_seq_len=24, **overrides)
    torch.manual_seed(0)
    ours = LoopedTransformer(shape).eval()
    config = hf_export.hf_config(
        {k: v for k, v in vars(shape).items() if v is not None}, 4, _Tokenizer(), {}
    )
    theirs = modeling.FixedFirstForCausalLM(modeling.FixedFirstConfig(**config)).eval()
    missing = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing.unexpected_keys
    tokens = torch.randint(0, 40, (2, 24))
    for depth in (1, 3, 8):
        with torch.no_grad():
            expected = ours(tokens, depth)
            got = theirs(tokens, depth=depth).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


class _Tokenizer:
    start_id, stop_id, pad_id = 1, 2, 0
