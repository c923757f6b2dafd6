"""The paired update: identical starting states, equal RMS, and an exact null when depths agree."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.synthetic import SyntheticSource
from fixedfirst.model import LoopedTransformer
from fixedfirst.studies.diagnose.update_pair import (
    StateSnapshot,
    UpdatePair,
    heldout_nll,
    pair_row_seeds,
    stack_batches,
    state_digest,
    update_rms,
)
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, train_step
from tests.conftest import tiny_model_config

TRAIN = TrainConfig(batch_size=8, micro_batch_size=4, seq_len=16, lr=3e-3)


def seeds(index: int) -> list[int]:
    return pair_row_seeds(0, index, 8)


def alone(model, optimizer) -> StepContext:
    return StepContext(ParallelModel.alone(model), optimizer, TRAIN)


def trained_state():
    """A tiny model and AdamW a few steps into training (so the moments are not zero)."""
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config())
    optimizer = build_optimizer(model, TRAIN)
    source = SyntheticSource(61, 16, seed=1)
    for step, depth in enumerate((2, 3, 2)):
        train_step(alone(model, optimizer), source.next_batch(8), depth, 3e-3, seeds(step))
    heldout = stack_batches(source.validation_batches(2, 4))
    return model, optimizer, source, heldout


class RecordingPair(UpdatePair):
    """Records the RMS of θ − θ_before of every model it evaluates (baseline first)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.applied_rms: list[float] = []

    def _evaluate(self):
        delta = [p.detach() - p0 for p, p0 in zip(self.params, self.before.params, strict=True)]
        self.applied_rms.append(update_rms(delta))
        return super()._evaluate()


def test_both_updates_start_from_the_captured_state():
    model, optimizer, source, heldout = trained_state()
    for group in optimizer.param_groups:
        group["lr"] = 2e-3  # the digest covers the learning rate too
    before = state_digest(model, optimizer)
    pair = UpdatePair(model, optimizer, TRAIN, heldout, [1, 2, 4], (2, 6), record_digests=True)
    with pair:
        first = pair.measure(source.next_batch(8), 2e-3, seeds(1))
        second = pair.measure(source.next_batch(8), 2e-3, seeds(2))
        # The live state now is the one after the deep update: not the captured one.
        assert state_digest(model, optimizer) != before
    assert first.start_digests == (before, before)
    assert second.start_digests == (before, before)
    assert state_digest(model, optimizer) == before  # leaving restores the state


def test_digest_sees_the_optimizer_state():
    model, optimizer, _, _ = trained_state()
    before = state_digest(model, optimizer)
    moments = optimizer.state[next(model.parameters())]["exp_avg"]
    moments.view(-1)[0] += 1e-6
    assert state_digest(model, optimizer) != before


def test_snapshot_restores_optimizer_moments_and_step_count():
    model, optimizer, source, _ = trained_state()
    twin, twin_optimizer, _, _ = trained_state()
    batch, other = source.next_batch(8), source.next_batch(8)
    snapshot = StateSnapshot(model, optimizer)
    before = state_digest(model, optimizer)
    train_step(alone(model, optimizer), other, 5, 3e-3, seeds(0))
    assert state_digest(model, optimizer) != before
    snapshot.restore(model, optimizer)
    assert state_digest(model, optimizer) == before
    # The restored state steps exactly like an untouched copy of the original does.
    train_step(alone(model, optimizer), batch, 5, 3e-3, seeds(7))
    train_step(alone(twin, twin_optimizer), batch, 5, 3e-3, seeds(7))
    assert state_digest(model, optimizer) == state_digest(twin, twin_optimizer)


@pytest.mark.parametrize(
    ("reference", "expected"),
    [("geometric-mean", None), ("shallow", "rms_shallow"), ("deep", "rms_deep")],
)
def test_rms_matching_gives_equal_rms(reference, expected):
    model, optimizer, source, heldout = trained_state()
    pair = RecordingPair(model, optimizer, TRAIN, heldout, [1, 2, 4, 6], (1, 6), reference)
    with pair:
        result = pair.measure(source.next_batch(8), 3e-3, seeds(3))
    baseline, shallow, deep = pair.applied_rms
    assert baseline == 0.0
    # The raw updates differ in size, so the matching had something to do ...
    assert abs(result.rms_shallow / result.rms_deep - 1) > 1e-4
    # ... and the two applied updates have the same RMS: the reference.
    assert shallow == pytest.approx(deep, rel=1e-6)
    assert shallow == pytest.approx(result.rms_reference, rel=1e-6)
    target = (
        (result.rms_shallow * result.rms_deep) ** 0.5
        if expected is None
        else getattr(result, expected)
    )
    assert result.rms_reference == pytest.approx(target, rel=1e-12)


def test_equal_depths_give_exactly_zero_benefit():
    model, optimizer, source, heldout = trained_state()
    with UpdatePair(model, optimizer, TRAIN, heldout, list(range(1, 9)), (3, 3)) as pair:
        for seed in range(2):
            result = pair.measure(source.next_batch(8), 3e-3, seeds(seed))
            assert all(v == 0.0 for v in result.benefit.values())
            assert (result.benefit_per_sequence == 0.0).all()
            # The update did change the model.
            assert pair.baseline is not None
            assert (result.nll_shallow.per_sequence != pair.baseline.per_sequence).any()


def test_different_depths_give_a_nonzero_benefit():
    model, optimizer, source, heldout = trained_state()
    with UpdatePair(model, optimizer, TRAIN, heldout, [1, 4, 8], (1, 8)) as pair:
        result = pair.measure(source.next_batch(8), 3e-3, seeds(0))
    assert any(v != 0.0 for v in result.benefit.values())
    shallow, deep = result.nll_shallow.mean(), result.nll_deep.mean()
    assert result.benefit == pytest.approx({k: shallow[k] - deep[k] for k in (1, 4, 8)}, abs=1e-12)
    assert result.benefit_per_sequence.shape == (8, 3)
    assert (result.benefit_per_sequence != 0.0).any()


def test_heldout_nll_per_sequence_matches_the_model_on_each_row_alone():
    """Per sequence, the NLL equals the model's own `nll_by_depth` on that row alone; the
    token-weighted mean equals it on the whole set; ignored targets count as no token."""
    model, _, _, heldout = trained_state()
    targets = heldout.targets.clone()
    targets[1, 5:] = -100  # a shorter sequence
    heldout = type(heldout)(heldout.inputs, targets)
    depths = [1, 3, 6]
    measured = heldout_nll(model, heldout, depths)
    assert measured.tokens.tolist() == [16, 5] + [16] * 6
    model.eval()
    with torch.no_grad():
        for j in range(8):
            alone = model.nll_by_depth(heldout.inputs[j : j + 1], targets[j : j + 1], depths)
            assert measured.per_sequence[j].tolist() == pytest.approx(
                [alone[k] for k in depths], rel=1e-5
            )
        whole = model.nll_by_depth(heldout.inputs, targets, depths)
    assert measured.mean() == pytest.approx(whole, rel=1e-5)


def test_stack_batches_pads_with_ignored_targets():
    source = SyntheticSource(61, 16, seed=1)
    a = source.validation_batches(1, 3)[0]
    short = type(a)(a.inputs[:, :10], a.targets[:, :10])
    stacked = stack_batches([a, short])
    assert stacked.inputs.shape == (6, 16)
    assert (stacked.targets[3:, 10:] == -100).all()
    assert torch.equal(stacked.targets[3:, :10], a.targets[:, :10])
