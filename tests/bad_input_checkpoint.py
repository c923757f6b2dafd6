"""Bad input around a checkpoint directory someone else trained (issue 66): a directory that is
not a checkpoint, an architecture without a depth handle, a shard missing or cut short, pickled
weights, a tokenizer that is not the model's, data in other tokens, a key that contradicts the
checkpoint, a resume from other weights, and the commands' own misuses (`finish`, `eval` and
`generate` of a checkpoint directory, `export --format checkpoint`), and a directory that is
none of what serving opens. Part of the bad-input table
(tests/bad_input_cases.py, docs/reference/bad-input.md); the assets `ckpt` (the tiny
Inkling2Loop checkpoint of tests/checkpoint_helpers.py), `ckpt-data` (text in its tokens) and
`ckpt-run` (a run from it paused at step 2) are built by `build_checkpoint_assets`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.bad_input_cases import Case, flip_byte
from tests.inkling_helpers import HAS_INKLING

SKIP = None if HAS_INKLING else "needs transformers >= 5.24 (Inkling2LoopForCausalLM)"
FINISH = ["finish", "ckpt", "--data", "ckpt-data", "--out", "finish"]
CHECKPOINT = ("ckpt", "ckpt-data")
DISAGREE = '[model]\ncheckpoint = "ckpt"\n[model.transformers]\nhidden_size = 64\n'


def build_checkpoint_assets(root: Path) -> None:
    """ckpt, ckpt-data and ckpt-run in `root` (the working directory), when transformers has
    Inkling2Loop."""
    if not HAS_INKLING:
        return
    from fixedfirst.config import load_config
    from fixedfirst.data.prepare import PrepareOptions, prepare
    from fixedfirst.train.trainer import Trainer
    from tests.checkpoint_helpers import corpus, save_checkpoint

    save_checkpoint(root / "ckpt")
    (root / "ckpt-corpus.txt").write_text(corpus())
    options = PrepareOptions(tokenizer="checkpoint", checkpoint="ckpt", separator="%")
    prepare(["ckpt-corpus.txt"], "ckpt-data", options)
    (root / "ckpt.toml").write_text(
        '[model]\ncheckpoint = "ckpt"\n[schedule]\nkind = "uniform"\nk_max = 6\n'
        '[train]\ntokens = 512\nbatch_size = 4\nseq_len = 16\ndevice = "cpu"\n'
        '[data]\nkind = "tokens"\npath = "ckpt-data"\n[eval]\nbatches = 1\n'
    )
    Trainer(load_config("ckpt.toml"), "ckpt-run", quiet=True).train(stop_after=2)


def notes_directory(work: Path) -> None:
    """A directory of something else: neither a run, an export nor a checkpoint."""
    (work / "notes").mkdir()
    (work / "notes" / "readme.txt").write_text("not a model\n")


def shard(work: Path, index: int) -> Path:
    return sorted((work / "ckpt").glob("model-*-of-*.safetensors"))[index]


def without_a_shard(work: Path) -> None:
    shard(work, 2).unlink()


def truncated_shard(work: Path) -> None:
    path = shard(work, -1)
    path.write_bytes(path.read_bytes()[:-100])


def llama_checkpoint(work: Path) -> None:
    (work / "llama").mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}
    (work / "llama" / "config.json").write_text(json.dumps(config))


def empty_checkpoint(work: Path) -> None:
    (work / "empty").mkdir()


def pickled_weights(work: Path) -> None:
    for path in (work / "ckpt").glob("model*.safetensors*"):
        path.unlink()
    (work / "ckpt" / "pytorch_model.bin").write_bytes(b"\x80\x04pickled weights")


def smaller_model(work: Path) -> None:
    """config.json says a vocabulary of 32 ids; the tokenizer beside it has 64."""
    path = work / "ckpt" / "config.json"
    config = json.loads(path.read_text())
    config["vocab_size"] = config["unpadded_vocab_size"] = 32
    path.write_text(json.dumps(config))


def without_tokenizer(work: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (work / "ckpt" / name).unlink()


def other_weights(work: Path) -> None:
    """The checkpoint's place holds other weights now (one byte of a shard flipped)."""
    flip_byte(shard(work, 0))


def moved_checkpoint(work: Path) -> None:
    shutil.move(work / "ckpt", work / "ckpt-moved")


CHECKPOINT_CASES: list[Case] = [
    Case(
        "checkpoint-not-a-checkpoint",
        "checkpoint directory",
        "`finish` from a directory without config.json",
        ["finish", "empty", "--data", "ckpt-data", "--out", "finish", "--tokens", "4096"],
        "model.checkpoint = empty: not a checkpoint directory (no config.json)",
        needs=CHECKPOINT,
        setup=empty_checkpoint,
        skip=SKIP,
    ),
    Case(
        "checkpoint-no-depth-handle",
        "checkpoint directory",
        "`finish` from a LlamaForCausalLM checkpoint (a model without loop passes to set)",
        ["finish", "llama", "--data", "ckpt-data", "--out", "finish", "--tokens", "4096"],
        "holds transformers' LlamaForCausalLM (model_type 'llama'), which has no depth handle",
        needs=CHECKPOINT,
        setup=llama_checkpoint,
        skip=SKIP,
    ),
    Case(
        "checkpoint-shard-missing",
        "checkpoint directory",
        "`finish` from a checkpoint copied without one of its shards",
        [*FINISH, "--tokens", "4096"],
        "model-00003-of-00007.safetensors is missing: model.safetensors.index.json puts",
        needs=CHECKPOINT,
        setup=without_a_shard,
        skip=SKIP,
    ),
    Case(
        "checkpoint-shard-truncated",
        "checkpoint directory",
        "`finish` from a checkpoint whose last shard was cut short by a copy",
        [*FINISH, "--tokens", "4096"],
        "model-00007-of-00007.safetensors is truncated",
        needs=CHECKPOINT,
        setup=truncated_shard,
        skip=SKIP,
    ),
    Case(
        "checkpoint-pickled-weights",
        "checkpoint directory",
        "`finish` from a checkpoint whose weights are pytorch_model.bin only",
        [*FINISH, "--tokens", "4096"],
        "its weights are pytorch_model.bin (a pickle, which can run code when read)",
        needs=CHECKPOINT,
        setup=pickled_weights,
        skip=SKIP,
    ),
    Case(
        "checkpoint-tokenizer-not-the-models",
        "checkpoint directory",
        "`prepare --tokenizer ckpt` where the tokenizer has 64 ids and config.json's model 32",
        ["prepare", "ckpt-corpus.txt", "--out", "more", "--tokenizer", "ckpt"],
        "its tokenizer has 64 ids and its model only 32 (config.json): the tokenizer is not",
        needs=(*CHECKPOINT, "ckpt-corpus.txt"),
        setup=smaller_model,
        skip=SKIP,
    ),
    Case(
        "checkpoint-without-tokenizer",
        "checkpoint directory",
        "`prepare --tokenizer ckpt` for a checkpoint copied without its tokenizer files",
        ["prepare", "ckpt-corpus.txt", "--out", "more", "--tokenizer", "ckpt"],
        "ckpt: no tokenizer files (tokenizer.json, tokenizer_config.json)",
        needs=(*CHECKPOINT, "ckpt-corpus.txt"),
        setup=without_tokenizer,
        skip=SKIP,
    ),
    Case(
        "checkpoint-data-other-tokens",
        "checkpoint directory",
        "`finish` on data prepared with fixedfirst's byte tokenizer, not the checkpoint's",
        ["finish", "ckpt", "--data", "data", "--out", "finish", "--tokens", "4096"],
        "data was tokenized by fixedfirst's byte tokenizer, not by the checkpoint's own",
        needs=(*CHECKPOINT, "data"),
        skip=SKIP,
    ),
    Case(
        "checkpoint-key-disagrees",
        "checkpoint directory",
        '`[model] checkpoint = "ckpt"` with `[model.transformers] hidden_size = 64` (it is 32)',
        ["train", "disagree.toml", "--out", "new-run"],
        "model.transformers.hidden_size = 64, but the checkpoint's config.json (ckpt) says 32",
        needs=CHECKPOINT,
        files={"disagree.toml": DISAGREE},
        skip=SKIP,
    ),
    Case(
        "checkpoint-resume-other-weights",
        "checkpoint directory",
        "`train --resume` of a run from a checkpoint whose directory holds other weights now",
        ["train", "--resume", "--out", "ckpt-run"],
        "its weights are not those this run started from",
        needs=(*CHECKPOINT, "ckpt-run"),
        setup=other_weights,
        skip=SKIP,
    ),
    Case(
        "checkpoint-resume-moved",
        "checkpoint directory",
        "`train --resume` of a run from a checkpoint that was moved elsewhere",
        ["train", "--resume", "--out", "ckpt-run"],
        "model.checkpoint = ckpt: no such directory (a checkpoint that moved: --set "
        "model.checkpoint=WHERE_IT_IS_NOW)",
        needs=(*CHECKPOINT, "ckpt-run"),
        setup=moved_checkpoint,
        skip=SKIP,
    ),
    Case(
        "finish-without-budget",
        "finish",
        "`finish` without --tokens or --flops",
        FINISH,
        "give the finishing run's budget: --tokens N",
        needs=CHECKPOINT,
        skip=SKIP,
    ),
    Case(
        "finish-control-is-the-run",
        "finish",
        "`finish --control` of a finishing run fixed at the checkpoint's own depth 3",
        [
            *FINISH,
            "--tokens",
            "512",
            "--control",
            "--set",
            "schedule.kind=fixed",
            "--set",
            "schedule.depth=3",
        ],
        "the finishing run trains at the checkpoint's own depth (3), so it is its own control",
        needs=CHECKPOINT,
        skip=SKIP,
    ),
    Case(
        "generate-neither-run-export-nor-checkpoint",
        "generate",
        "`generate notes` of a directory that is neither a run, an export nor a checkpoint",
        ["generate", "notes", "--prompt", "river stone"],
        "notes is neither a run (config.toml), an export (`fixedfirst export`'s config.json) "
        "nor a Hugging Face checkpoint directory",
        setup=notes_directory,
    ),
    Case(
        "generate-checkpoint-with-step",
        "generate",
        "`generate ckpt --checkpoint 2` of a checkpoint directory (one set of weights)",
        ["generate", "ckpt", "--prompt", "river stone", "--checkpoint", "2"],
        "--checkpoint is for a run; ckpt is a checkpoint directory",
        needs=CHECKPOINT,
        skip=SKIP,
    ),
    Case(
        "eval-checkpoint-without-out",
        "eval",
        "`eval ckpt --data ckpt-data` (a checkpoint directory, no --out)",
        ["eval", "ckpt", "--data", "ckpt-data"],
        "ckpt is a checkpoint directory: give --data DATA",
        needs=CHECKPOINT,
        skip=SKIP,
    ),
    Case(
        "export-checkpoint-from-scratch",
        "export",
        "`export run --format checkpoint` of a run trained from scratch",
        ["export", "run", "--format", "checkpoint", "--out", "handed-back"],
        "--format checkpoint hands back a run that started from a checkpoint directory",
        needs=("run",),
    ),
    Case(
        "export-adapters-alone-full",
        "export",
        "`export ckpt-run --format checkpoint --adapters alone` of a run that trained every weight",
        ["export", "ckpt-run", "--format", "checkpoint", "--adapters", "alone", "--out", "hb"],
        "--adapters alone saves a run's low-rank adapters, and this run trained every weight",
        needs=(*CHECKPOINT, "ckpt-run"),
        skip=SKIP,
    ),
]
