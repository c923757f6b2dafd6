"""Training features of fixedfirst's runs on a transformers looped architecture (the tiny
Inkling2LoopForCausalLM of tests/inkling_helpers.py): activation checkpointing through the
model's own switch, bf16 autocast that keeps the modules the architecture declares float32 in
float32, and FSDP2 on two gloo processes against one process, full and low-rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixedfirst.config import LowRankConfig
from fixedfirst.model.keep_float32 import declared_float32, float32_modules
from fixedfirst.model.lowrank import apply_lowrank
from fixedfirst.model.transformers_loop import TransformersLoop
from tests.inkling_helpers import INKLING_TOML, needs_inkling, tiny_inkling
from tests.trainer_helpers import train_records

pytestmark = needs_inkling

ROOT = Path(__file__).resolve().parents[1]


def wrapped(seed: int = 0, lowrank: bool = False) -> TransformersLoop:
    network = tiny_inkling(seed)
    model = TransformersLoop(network, "Inkling2LoopForCausalLM")
    if lowrank:
        pytest.importorskip("peft")
        model.network = apply_lowrank(model.network, LowRankConfig(rank=2))
        with torch.no_grad():  # B = 0 would give A no gradient
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    return model.train()


def gradients(model: TransformersLoop, checkpoint: bool, depth: int):
    model.zero_grad()
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(4))
    logits = model(tokens, depth, checkpoint=checkpoint)
    logits.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("lowrank", [False, True])
def test_activation_checkpointing_gives_the_same_gradients(lowrank):
    """With the model's own activation checkpointing the forward and every gradient are those
    of plain backprop at three passes (same parameters given a gradient), and the looped layer's
    attention really runs again in the backward: once more per pass."""
    model = wrapped(lowrank=lowrank)
    plain_out, plain = gradients(model, False, 3)
    calls = []
    attention = model.transformers_model.model.layers[1].self_attn
    attention.register_forward_hook(lambda *_: calls.append(1))
    ckpt_out, ckpt = gradients(model, True, 3)
    assert len(calls) == 6  # 3 passes, each recomputed in the backward
    torch.testing.assert_close(ckpt_out, plain_out, rtol=0, atol=0)
    assert ckpt.keys() == plain.keys() and len(plain) > 0
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)
    calls.clear()
    gradients(model, False, 3)  # and switched off again
    assert len(calls) == 3


def test_the_declared_float32_modules_compute_in_float32_under_bf16_autocast():
    """Inkling2Loop declares its routers, convolutions, attention residuals and message gates'
    output projections float32. Under bf16 autocast their outputs stay float32 while the other
    projections compute in bf16; without the hooks autocast would take the routers to bf16."""
    model = wrapped()
    names = float32_modules(model.network, declared_float32(model.network))
    assert "model.layers.1.mlp.gate" in names  # the router, from its weight's name
    assert "model.layers.1.q_message_gate.forget_gate_proj" in names
    assert "model.final_input" in names and "model.layers.1.post_mlp_convolution" in names
    seen: dict[str, torch.dtype] = {}

    def record(name):
        def hook(module, args, output):
            seen[name] = (output[0] if isinstance(output, tuple) else output).dtype

        return hook

    layer = model.network.model.layers[1]
    for name, module in (
        ("router", layer.mlp.gate),
        ("forget gate", layer.q_message_gate.forget_gate_proj),
        ("query", layer.self_attn.q_proj.linear),
    ):
        module.register_forward_hook(record(name))
    tokens = torch.randint(0, 64, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens, 2)
    assert seen == {
        "router": torch.float32,
        "forget gate": torch.float32,
        "query": torch.bfloat16,
    }
    for handle in model.float32_hooks:
        handle.remove()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens, 2)
    assert seen["router"] == torch.bfloat16  # what the hooks prevent


def test_bf16_changes_nothing_outside_autocast():
    """In float32 the hooks are idle: the wrapped model's logits are the bare model's."""
    tokens = torch.randint(0, 64, (2, 16))
    bare = tiny_inkling(5)
    bare.config.loop_num_passes = 2
    with torch.no_grad():
        expected = bare(input_ids=tokens, use_cache=False).logits
        torch.testing.assert_close(wrapped(5).eval()(tokens, 2), expected, rtol=0, atol=0)


FIVE_STEPS = INKLING_TOML.replace("tokens = 1280", "tokens = 640")
"""Five steps of 8 sequences: depth 1 for the first 2, where the message gates get no
gradient, then drawn from 1..3."""


def torchrun(config: Path, out: Path, *overrides: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT),
        "OMP_NUM_THREADS": "1",
        "FIXEDFIRST_DIST_TIMEOUT": "60",
    }
    command = [sys.executable, "-m", "fixedfirst", "train", str(config), "--out", str(out)]
    command += ["--quiet", "--nproc", "2", *[a for o in overrides for a in ("--set", o)]]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("extra", "overrides"),
    [
        ("", ()),
        pytest.param(  # 27 s of CPU; make test keeps the full-weights arm
            "\n[train.lowrank]\nrank = 4\n",
            ("train.checkpoint_activations=true", "train.precision=bf16"),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["full", "lowrank-checkpointed-bf16"],
)
def test_fsdp2_on_two_processes_trains_what_one_does(tmp_path, extra, overrides):
    """`--nproc 2` with FSDP2 on gloo trains at the same depths as one process. Full
    fine-tuning in fp32: the same losses and gradient norms over 5 steps within 1e-5 (relative).
    Low-rank adapters with activation checkpointing in bf16: within 1e-5 while the steps run one
    pass, within 1e-2 after (from the first two-pass step the fp32 sums, taken in another
    order, round to other bf16 values, and the routers may pick other experts: 0.3% apart at
    step 5 in one run). Its float32 modules need their weights gathered in float32: gathered in
    bf16, the routers' products fail on mixed dtypes."""
    from fixedfirst.config import load_config
    from fixedfirst.train.trainer import Trainer

    if extra:
        pytest.importorskip("peft")
    config = tmp_path / "run.toml"
    config.write_text(FIVE_STEPS + extra)
    Trainer(load_config(config, list(overrides)), tmp_path / "one", quiet=True).train()
    torchrun(config, tmp_path / "fsdp", "train.strategy=fsdp", *overrides)
    one, two = train_records(tmp_path / "one"), train_records(tmp_path / "fsdp")
    depths = [r["depth"] for r in one]
    assert len(one) == 5 and [r["depth"] for r in two] == depths and depths[:2] == [1, 1]
    one_pass = next(i for i, d in enumerate(depths) if d > 1) if extra else len(depths)
    for key in ("loss", "grad_norm"):
        a = torch.tensor([r[key] for r in two], dtype=torch.float64)
        b = torch.tensor([r[key] for r in one], dtype=torch.float64)
        torch.testing.assert_close(a[:one_pass], b[:one_pass], rtol=1e-5, atol=0)
        torch.testing.assert_close(a, b, rtol=1e-2 if extra else 1e-5, atol=0)
