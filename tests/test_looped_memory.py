"""The memory model of a transformers looped architecture (compute/looped_memory.py) and the plan
of a finish from config.json alone (`fixedfirst plan --model-config`)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.inkling_helpers import HAS_INKLING

pytestmark = pytest.mark.skipif(not HAS_INKLING, reason="needs transformers >= 5.24")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/models/inkling2-mini/config.json"
COMMITTED = ROOT / "docs/figures/plan-inkling2-mini.md"


def benchmark():
    spec = importlib.util.spec_from_file_location(
        "looped_memory_bench", ROOT / "benchmarks/looped_memory.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("size", ["width 160, 6 layers", "width 256, 4 layers"])
@pytest.mark.parametrize("lowrank", [False, True], ids=["full", "low-rank"])
def test_the_activations_are_within_2_percent_of_the_census_at_a_size_the_fit_never_saw(
    lowrank, size
):
    """The census (every tensor saved for the backward, counted by storage) of one forward of
    a held-out size, against the fitted model's total (0.3-0.8% apart when written; dropping
    the messages between passes, 3% of it, fails)."""
    pytest.importorskip("peft")
    from fixedfirst.compute.looped_memory import activations, looped_shape
    from fixedfirst.config import LowRankConfig

    bench = benchmark()
    options = bench.HELD_OUT[size]
    rows, seq, depth = 1, 64, 3
    counted = sum(bench.census(options, rows, seq, depth, False, lowrank).values())
    shape = looped_shape(bench.ARCHITECTURE, options, LowRankConfig() if lowrank else None)
    modeled = activations(shape, False, lowrank, rows, seq, depth, False).total
    assert abs(modeled / counted - 1) < 0.02, (modeled, counted)


@pytest.mark.parametrize("name", ["width 160, 6 layers", "width 256, 4 layers"])
@pytest.mark.parametrize("lowrank", [False, True], ids=["full", "low-rank"])
def test_the_peak_of_a_step_is_within_10_percent_at_a_size_the_fit_never_saw(lowrank, name):
    """One real training step (the trainer's) at depth 4, its peak of tensors measured as
    benchmarks/looped_memory.py --check measures it, against the model (the benchmark's
    committed table has every arm: checkpointed, bf16, depth 1)."""
    pytest.importorskip("peft")
    from fixedfirst.compute.looped_memory import looped_shape, looped_training_memory
    from fixedfirst.compute.memory import Placement
    from fixedfirst.config import LowRankConfig

    bench = benchmark()
    depth = 4
    measured = bench.measured_peak(name, lowrank, False, False, depth)
    shape = looped_shape(
        bench.ARCHITECTURE, bench.HELD_OUT[name], LowRankConfig() if lowrank else None
    )
    modeled = looped_training_memory(
        shape, Placement("cpu"), lowrank, bench.CHECK_ROWS, bench.CHECK_SEQ, depth, False
    ).peak
    assert abs(modeled / measured - 1) < 0.10, (modeled, measured)


def test_the_state_under_fsdp_is_the_hand_count():
    """Full fine-tuning on 8 GPUs: 4 bytes of weight, 4 of gradient and 8 of AdamW per
    parameter over 8 shards, and at the step one fp32 temporary of each shard (fused AdamW's
    moments); the parameters counted here from the configuration by hand."""
    import json

    from fixedfirst.compute.looped_memory import looped_shape, looped_training_memory
    from fixedfirst.compute.memory import Placement

    bench = benchmark()
    options = bench.HELD_OUT["width 256, 4 layers"]
    shape = looped_shape(bench.ARCHITECTURE, options, None)
    d, v, e, i = 256, 2048, 8, 192
    experts = 3 * e * i * d  # gate_up (2i x d) and down (d x i) per expert
    assert all(layer.expert_parameters == experts for layer in shape.layers)
    assert shape.parameters > 4 * experts + 2 * v * d  # the experts, embedding and head at least
    memory = looped_training_memory(
        shape, Placement("cuda", True, "fsdp", 8), False, 1, 64, 2, True
    )
    share = -(-shape.parameters // 8)
    assert memory.parameters == 4 * share
    assert memory.gradients == 4 * share
    assert memory.optimizer == 8 * share
    assert memory.peak >= 4 * share + 8 * share + 4 * share + 4 * share + 2 * 8 * 64
    assert json.dumps(options)  # the held-out size is plain data


def test_the_plan_of_inkling2_mini_is_the_committed_one(capsys):
    """`fixedfirst plan --model-config` prints, from config.json alone, what
    docs/figures/plan-inkling2-mini.md holds (the command is the file's own)."""
    from fixedfirst.cli.main import main

    text = COMMITTED.read_text()
    command = re.search(r"Made by `fixedfirst (plan [^`]+)`", text)
    assert command is not None
    argv = command.group(1).split()
    argv = [str(ROOT / a) if a.startswith(("configs/", "docs/")) else a for a in argv]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code in (0, None)
    printed = capsys.readouterr().out.strip()
    committed = text.split("```text\n", 1)[1].rsplit("```", 1)[0].strip()
    normalise = lambda s: s.replace(str(ROOT) + "/", "")  # noqa: E731
    assert normalise(printed) == committed
    assert "does not fit" in printed


def test_the_plans_flops_are_within_what_it_says_of_torchs_count():
    """The plan's FLOPs per token (counted from the shape) against torch's FlopCounterMode on
    the model with its experts computed one by one ("eager": FlopCounterMode counts nothing for
    torch._grouped_mm, the default); the plan's own line says 14-18% below, full fine-tuning."""
    import torch

    from fixedfirst.compute.looped_flops import flops_per_token
    from fixedfirst.compute.looped_memory import looped_shape
    from fixedfirst.compute.measured import measure_flops
    from fixedfirst.config import TransformersModelConfig
    from fixedfirst.model.loss import next_token_loss
    from fixedfirst.model.transformers_loop import build

    bench = benchmark()
    options = dict(bench.HELD_OUT["width 256, 4 layers"], max_position_embeddings=512)
    torch.manual_seed(0)
    model = build(TransformersModelConfig("transformers", bench.ARCHITECTURE, options))
    model.network.set_experts_implementation("eager")
    x = torch.randint(0, options["unpadded_vocab_size"], (1, 257))

    def loss():
        logits = model.network(input_ids=x[:, :-1], use_cache=False).logits
        return next_token_loss(logits, x[:, 1:])

    counted = measure_flops(model.network, loss, 256, (1, 2, 3), model.handle)
    shape = looped_shape(bench.ARCHITECTURE, options, None)
    for depth in (1, 3):
        ratio = flops_per_token(shape, 256, depth, False, False) / counted.train(depth)
        assert 0.82 <= ratio <= 0.86 + 0.01, (depth, ratio)


def test_the_committed_fit_names_the_features_the_model_computes():
    """looped_memory_fit.json is read by position: its feature lists must be the module's."""
    from fixedfirst.compute import looped_memory as lm

    fit = lm.fitted()
    assert fit["features"]["layer"] == list(lm.LAYER_FEATURES)
    assert fit["features"]["message"] == list(lm.MESSAGE_FEATURES)
    assert fit["features"]["model"] == list(lm.MODEL_FEATURES)
    for key, coefficients in fit["fits"].items():
        assert set(coefficients["layer"]) == {
            "sliding",
            "full",
            "sliding, messages",
            "full, messages",
        }, key
        assert all(len(c) == len(lm.LAYER_FEATURES) for c in coefficients["layer"].values())
        assert len(coefficients["copies"]) == 5
