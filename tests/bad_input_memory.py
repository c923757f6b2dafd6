"""Bad input around memory: `fixedfirst plan`'s arguments, and a training step that cannot fit.

Part of the bad-input table (tests/bad_input_cases.py, docs/reference/bad-input.md)."""

from __future__ import annotations

from tests.bad_input_cases import Case
from tests.bad_input_foreign import SKIP as FOREIGN_SKIP

HUGE_STEP = [
    *["--set", "train.batch_size=1000000", "--set", "train.micro_batch_size=1000000"],
    *["--set", "train.tokens=32000000", "--set", "schedule.k_max=1024"],
]

MEMORY_CASES: list[Case] = [
    Case(
        "plan-gpu-unknown",
        "plan",
        "`plan --gpu v100` (a GPU kind the table does not have)",
        ["plan", "tiny.toml", "--gpu", "v100"],
        "--gpu 'v100': not a kind we know; known: a100-40gb, a100, h100",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-gpus-zero",
        "plan",
        "`plan --gpus 0`",
        ["plan", "tiny.toml", "--gpus", "0"],
        "--gpus must be in 1..4096, got 0",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-mfu-percent",
        "plan",
        "`plan --mfu 58` (a percentage where a fraction is meant)",
        ["plan", "tiny.toml", "--mfu", "58"],
        "--mfu must be in (0, 1], got 58.0",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-measured-missing",
        "plan",
        "`plan --measured DIR` where no first run wrote its output",
        ["plan", "tiny.toml", "--measured", "first-run"],
        "--measured first-run: no first run's output there (first-run/first-run.json",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-measured-and-mfu",
        "plan",
        "`plan --mfu 0.4 --measured DIR` (two answers to one question)",
        ["plan", "tiny.toml", "--mfu", "0.4", "--measured", "first-run"],
        "--mfu and --measured both say what the MFU is; give one of them",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-gpu-memory-negative",
        "plan",
        "`plan --gpu-memory -80`",
        ["plan", "tiny.toml", "--gpu-memory", "-80"],
        "--gpu-memory must be a positive number, got -80.0",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-batch-split",
        "plan",
        "`plan --gpus 3` for a batch of 8 sequences",
        ["plan", "tiny.toml", "--gpus", "3"],
        "train.batch_size = 8 must split into 3 GPU(s) of whole micro-batches of 4",
        needs=("tiny.toml",),
    ),
    Case(
        "plan-model-config-no-depth-handle",
        "plan",
        "`plan --model-config config.json` of an architecture without a depth handle "
        "(LlamaForCausalLM)",
        ["plan", "--model-config", "config.json"],
        "has no depth handle",
        files={"config.json": '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}'},
        skip=FOREIGN_SKIP,
    ),
    Case(
        "plan-model-config-missing",
        "plan",
        "`plan --model-config` naming a file that is not there",
        ["plan", "--model-config", "absent/config.json"],
        "--model-config absent/config.json: cannot read it",
    ),
    Case(
        "plan-model-config-garbled",
        "plan",
        "`plan --model-config` of a file that is not JSON (a config.json cut short)",
        ["plan", "--model-config", "config.json"],
        "not a transformers config.json",
        files={"config.json": '{"architectures": ["Inkling2LoopForCausalLM"], "hidden'},
    ),
    Case(
        "plan-config-and-model-config",
        "plan",
        "`plan` given both a run configuration and `--model-config`, or neither",
        ["plan"],
        "give a run configuration CONFIG.toml or --model-config CONFIG.json, one",
    ),
    Case(
        "plan-run-with-model-config-flag",
        "plan",
        "`plan RUN.toml --seq-len 512` (a flag of `--model-config` given with a run "
        "configuration, which plans with its own sequence length, micro-batch and depths)",
        ["plan", "tiny.toml", "--seq-len", "512"],
        "--seq-len is for --model-config; a run configuration plans with its own train.seq_len",
        needs=("tiny.toml",),
    ),
    Case(
        "train-step-does-not-fit",
        "bounds",
        "a step whose activations cannot fit: a million sequences in one micro-batch at depths "
        "up to 1,024 (the check before the first step; `train.check_memory = false` skips it)",
        ["train", "tiny.toml", "--out", "new-run", *HUGE_STEP, "--set", "train.device=cpu"],
        "a training step needs an estimated",
        needs=("tiny.toml",),
    ),
]
