"""Before step 0 (train/warm_up.py): every compiled graph built, and the deepest step measured
and refused in one line when it does not fit; the weights and AdamW untouched either way."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from fixedfirst.compute.memory import Placement, training_memory
from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import validation_nll
from fixedfirst.model import LoopedLM, LoopedTransformer, looped
from fixedfirst.train import warm_up
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step
from fixedfirst.train.trainer import Trainer
from tests.conftest import tiny_model_config
from tests.inkling_helpers import has_inkling, tiny_inkling
from tests.trainer_helpers import tiny_config

CPU = torch.device("cpu")


def context(model: LoopedLM, **train) -> StepContext:
    config = TrainConfig(batch_size=4, seq_len=16, micro_batch_size=2, **train)
    return StepContext(ParallelModel.alone(model), build_optimizer(model, config), config)


def batches(rows: int, seq: int = 16, count: int = 1) -> list[Batch]:
    out = []
    for i in range(count):
        x = torch.randint(0, 61, (rows, seq + 1), generator=torch.Generator().manual_seed(i))
        out.append(Batch(x[:, :-1], x[:, 1:]))
    return out


@pytest.fixture
def compiled_by_dynamo_alone(monkeypatch):
    """torch.compile with AOTAutograd's eager backend: the graphs are traced and guarded as
    inductor's are (what recompiles is decided there), but no code is generated, which on a
    CPU takes minutes (benchmarks/first_run.py --smoke compiles with inductor)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    looped.compiled_iteration.cache_clear()
    torch._dynamo.reset()
    yield
    looped.compiled_iteration.cache_clear()
    torch._dynamo.reset()


@pytest.mark.parametrize("warmed", [True, False], ids=["warmed", "cold"])
def test_after_warm_up_no_depth_and_no_evaluation_compiles_again(compiled_by_dynamo_alone, warmed):
    """Depths 1..16 with truncated backprop (no-grad iterations from depth 4 on), then an
    evaluation at every depth 1..16, with recompiles turned into errors: the warm-up at the
    deepest depth and its two-depth evaluation built every graph. Cold, without the warm-up,
    the sweep's second depth already compiles (the iteration from the previous state)."""
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config())
    model.compile_loop()
    step = context(model, grad_depth=3)
    held_out = batches(2, count=2)  # the evaluation's shape is not the training micro-batch's
    if warmed:
        warm_up.warm_up(step, 16, 16, held_out, compiled=True)
    else:
        train_step(step, batches(4)[0], 1, 1e-3, state_seeds(0, 0, range(4)))

    def sweep() -> None:
        for depth in range(1, 17):
            train_step(step, batches(4)[0], depth, 1e-3, state_seeds(0, depth, range(4)))
        validation_nll(model, held_out, list(range(1, 17)), CPU)

    with torch._dynamo.config.patch(error_on_recompile=True):
        if warmed:
            sweep()
        else:
            with pytest.raises(torch._dynamo.exc.RecompileError):
                sweep()


def test_the_warm_up_leaves_weights_optimizer_and_random_state_as_they_were():
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config())
    before = copy.deepcopy(model.state_dict())
    step = context(model)
    rng = torch.get_rng_state()
    measured = warm_up.warm_up(step, 8, 16, batches(2), capacity=1 << 40)
    assert measured is not None and measured.depth == 8 and measured.micro_batch == 2
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert not step.optimizer.state
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_measured_deepest_step_is_what_the_memory_model_predicts():
    """The memory model (an independent count: compute/memory.py) against the warm-up's
    measurement of the same step: the forward and backward's peak plus AdamW's moments, which
    the model counts in its peak."""
    torch.manual_seed(0)
    config = tiny_model_config(d_model=64, vocab_size=97)
    step = context(LoopedTransformer(config))
    measured = warm_up.warm_up(step, 12, 16, [], capacity=1 << 40)
    predicted = training_memory(config, Placement(), 2, 1, 16, 12).peak
    assert measured is not None
    assert measured.optimizer_state == 2 * 4 * sum(
        p.numel() for p in step.model.module.parameters()
    )
    assert measured.peak == pytest.approx(predicted, rel=0.15)


def test_a_deepest_step_beyond_the_budget_is_refused_in_one_line():
    torch.manual_seed(0)
    step = context(LoopedTransformer(tiny_model_config()))
    with pytest.raises(UserError) as refused:
        warm_up.warm_up(step, 16, 16, [], capacity=1 << 20)
    message = str(refused.value)
    assert "\n" not in message
    assert "the run's deepest step (depth 16, micro-batches of 2) measured" in message
    assert "more than 90% of this device's 0.0 GiB; lower train.micro_batch_size or" in message
    assert "train.check_memory = false" in message
    unchecked = context(LoopedTransformer(tiny_model_config()), check_memory=False)
    assert warm_up.warm_up(unchecked, 16, 16, [], capacity=1 << 20) is not None


def test_the_trainer_measures_before_step_0_where_a_budget_is_known(tmp_path, monkeypatch, capsys):
    """On a GPU the trainer measures; here the device's budget is given, as a GPU's would be:
    too small, the run is refused before its first step with nothing in the run directory."""
    config = tiny_config("train.tokens=256")
    monkeypatch.setattr(warm_up, "capacity_to_measure", lambda device: 1 << 20)
    with pytest.raises(UserError, match="the run's deepest step \\(depth 6, micro-batches of 4"):
        Trainer(config, str(tmp_path / "refused"), quiet=True)
    assert not (tmp_path / "refused" / "checkpoints").exists()
    assert not (tmp_path / "refused" / "config.toml").exists()

    monkeypatch.setattr(warm_up, "capacity_to_measure", lambda device: 1 << 40)
    Trainer(config, str(tmp_path / "run")).train()
    assert "before step 0: depth 6 measured" in capsys.readouterr().out


@pytest.mark.skipif(not has_inkling(), reason="needs transformers with inkling2_loop")
def test_the_deepest_step_of_a_model_we_did_not_write_is_measured():
    """The warm-up draws its tokens below the model's own vocabulary, which a transformers model
    declares in its config (ours in ModelConfig): on a GPU every run measures this step."""
    from fixedfirst.model.transformers_loop import TransformersLoop

    model = TransformersLoop(tiny_inkling(), "Inkling2LoopForCausalLM")
    measured = warm_up.warm_up(context(model), 3, 16, [], capacity=1 << 40)
    assert measured is not None and measured.depth == 3 and measured.peak > 0
