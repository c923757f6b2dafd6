"""A shallow and a deep update from one state, matched in size, compared on a held-out set.

docs/design.md §6, the paper's Figure 4: from one model, optimizer state, batch and learning
rate, one update at depth 4 and one at depth 16, each rescaled to a common RMS so that only their
directions differ; Benefit(k) is the held-out NLL at serving depth k after the shallow update
minus after the deep one, per held-out sequence. Restoring the state copies into the live
tensors, so the optimizer's references stay valid.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import autocast
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX, next_token_loss
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, train_step

RmsReference = Literal["geometric-mean", "shallow", "deep"]
RMS_REFERENCES: tuple[str, ...] = ("geometric-mean", "shallow", "deep")


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()


def state_digest(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """SHA-256 of every parameter and every optimizer state tensor and value, in a fixed order.

    Two states with the same digest are bit-identical in everything an optimizer step reads
    (gradients excepted: the step makes its own). Learning rates are included.
    """
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(_bytes(p))
    index = {id(p): i for i, p in enumerate(model.parameters())}
    for tensor, state in sorted(optimizer.state.items(), key=lambda item: index[id(item[0])]):
        h.update(str(index[id(tensor)]).encode())
        for key in sorted(state):
            h.update(key.encode())
            value = state[key]
            h.update(_bytes(value) if torch.is_tensor(value) else repr(value).encode())
    for group in optimizer.param_groups:
        h.update(repr({k: v for k, v in group.items() if k != "params"}).encode())
    return h.hexdigest()


class StateSnapshot:
    """A copy of the parameters and the optimizer state, restorable in place.

    Restoring copies into the live tensors (no allocation), so the optimizer's references to its
    parameters and moment buffers stay valid; state the snapshot did not have (e.g. moments an
    optimizer's first step creates) is removed.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.params = [p.detach().clone() for p in model.parameters()]
        self.optimizer_state = {
            p: {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in s.items()}
            for p, s in optimizer.state.items()
        }

    @torch.no_grad()
    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        for p, saved in zip(model.parameters(), self.params, strict=True):
            p.copy_(saved)
        for tensor in list(optimizer.state):
            if tensor not in self.optimizer_state:
                del optimizer.state[tensor]
        for tensor, saved_state in self.optimizer_state.items():
            live = optimizer.state[tensor]
            for key in list(live):
                if key not in saved_state:
                    del live[key]
            for key, value in saved_state.items():
                current = live.get(key)
                if torch.is_tensor(value) and torch.is_tensor(current):
                    current.copy_(value)
                else:
                    live[key] = value.clone() if torch.is_tensor(value) else value


def update_rms(delta: list[torch.Tensor]) -> float:
    """sqrt(mean of squares) over every element of every tensor (accumulated in float64)."""
    total = sum(float(d.double().square().sum()) for d in delta)
    count = sum(d.numel() for d in delta)
    return math.sqrt(total / count)


def reference_rms(rms_shallow: float, rms_deep: float, reference: RmsReference) -> float:
    if reference == "geometric-mean":
        return math.sqrt(rms_shallow * rms_deep)
    if reference == "shallow":
        return rms_shallow
    if reference == "deep":
        return rms_deep
    raise ValueError(f"unknown RMS reference {reference!r}; choose from {RMS_REFERENCES}")


@dataclass(frozen=True, eq=False)
class HeldoutNLL:
    """NLL on the held-out set by sequence and serving depth.

    Kept per sequence, not only as one mean, so that an interval can resample the held-out
    sequences as well as the training batches (docs/design.md §6)."""

    depths: list[int]
    per_sequence: np.ndarray
    """(sequences, depths): mean NLL over each sequence's scored tokens (0 where it has none)."""
    tokens: np.ndarray
    """(sequences,): scored tokens of each sequence, the weights of the token-weighted mean."""

    def mean(self) -> dict[int, float]:
        """Token-weighted mean NLL per serving depth: nats per scored token of the whole set."""
        means = self.tokens @ self.per_sequence / self.tokens.sum()
        return dict(zip(self.depths, means.tolist(), strict=True))


def heldout_nll(
    model: LoopedTransformer,
    heldout: Batch,
    serving_depths: list[int],
    dtype: torch.dtype = torch.float32,
) -> HeldoutNLL:
    """NLL at every serving depth, per held-out sequence: one no-grad, eval-mode pass."""
    was_training = model.training
    model.eval()
    targets = heldout.targets
    scored = targets != IGNORE_INDEX
    tokens = scored.sum(dim=1).double()
    per_sequence = torch.zeros(targets.shape[0], len(serving_depths), dtype=torch.float64)
    try:
        with torch.no_grad(), autocast(heldout.inputs.device, dtype):
            for depth, logits in model.logits_by_depth(heldout.inputs, serving_depths):
                losses = next_token_loss(logits, targets, reduction="none")
                sums = losses.view_as(targets).double().sum(dim=1)
                columns = [j for j, k in enumerate(serving_depths) if k == depth]
                per_sequence[:, columns] = (sums / tokens.clamp(min=1)).cpu()[:, None]
    finally:
        model.train(was_training)
    return HeldoutNLL(list(serving_depths), per_sequence.numpy(), tokens.cpu().numpy())


def stack_batches(batches: list[Batch]) -> Batch:
    """One batch holding every row of `batches`; shorter rows are right-padded with ignored
    targets (causal attention: padding after a position cannot change its prediction)."""
    if not batches:
        raise UserError("the held-out set is empty")
    length = max(b.inputs.shape[1] for b in batches)
    inputs, targets = [], []
    for b in batches:
        pad = length - b.inputs.shape[1]
        inputs.append(torch.nn.functional.pad(b.inputs, (0, pad), value=0))
        targets.append(torch.nn.functional.pad(b.targets, (0, pad), value=IGNORE_INDEX))
    return Batch(torch.cat(inputs), torch.cat(targets))


_PAIR_NOISE_STREAM = 0xD1A6_0005E
"""Keeps the pair updates' initial-state seeds apart from the trainer's."""


def pair_row_seeds(seed: int, index: int, rows: int) -> list[int]:
    """Initial-state seeds of the rows of diagnostic batch `index`: both updates of a pair use
    the same ones (so the two steps see the same noise), and so does every u."""
    return [
        int(np.random.SeedSequence([seed, index, row, _PAIR_NOISE_STREAM]).generate_state(1)[0])
        for row in range(rows)
    ]


@dataclass
class PairResult:
    """One batch's paired measurement."""

    nll_shallow: HeldoutNLL
    """Held-out NLL per sequence and serving depth after the rescaled shallow update."""
    nll_deep: HeldoutNLL
    """The same after the rescaled deep update."""
    rms_shallow: float
    """RMS of the raw shallow update (before rescaling)."""
    rms_deep: float
    rms_reference: float
    """The common RMS both updates were rescaled to."""
    start_digests: tuple[str, str] | None = None
    """State digests taken right before each update (when asked for): must be equal."""

    @property
    def benefit_per_sequence(self) -> np.ndarray:
        """(sequences, depths): NLL after the shallow update − after the deep one, per held-out
        sequence; positive favours deep."""
        return self.nll_shallow.per_sequence - self.nll_deep.per_sequence

    @property
    def benefit(self) -> dict[int, float]:
        """Token-weighted mean over the held-out set of `benefit_per_sequence`, per depth."""
        tokens = self.nll_shallow.tokens
        means = tokens @ self.benefit_per_sequence / tokens.sum()
        return dict(zip(self.nll_shallow.depths, means.tolist(), strict=True))


class UpdatePair:
    """Measures update pairs at one fixed state of `model` and `optimizer`.

    Use as a context manager: entering captures the state (and its held-out NLL, `baseline`),
    each `measure` returns the live model and optimizer to that state before each update, and
    leaving restores it, so the caller continues from exactly where it was.
    """

    def __init__(
        self,
        model: LoopedTransformer,
        optimizer: torch.optim.Optimizer,
        train: TrainConfig,
        heldout: Batch,
        serving_depths: list[int],
        depths: tuple[int, int] = (4, 16),
        reference: RmsReference = "geometric-mean",
        dtype: torch.dtype = torch.float32,
        record_digests: bool = False,
    ) -> None:
        if reference not in RMS_REFERENCES:
            raise UserError(f"unknown RMS reference {reference!r}; choose from {RMS_REFERENCES}")
        self.model, self.optimizer, self.train = model, optimizer, train
        self.heldout, self.serving_depths = heldout, list(serving_depths)
        self.depths, self.reference, self.dtype = depths, reference, dtype
        self.record_digests = record_digests
        self.step_context = StepContext(ParallelModel.alone(model), optimizer, train, dtype)
        self.params = list(model.parameters())
        self.before: StateSnapshot | None = None
        self.baseline: HeldoutNLL | None = None
        # Reused for every batch: the raw updates of the shallow and the deep step.
        self.deltas = tuple([torch.empty_like(p) for p in self.params] for _ in depths)
        self.seconds = {"updates": 0.0, "evaluation": 0.0}

    def __enter__(self) -> UpdatePair:
        self.before = StateSnapshot(self.model, self.optimizer)
        self.baseline = self._evaluate()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.before is not None
        self.before.restore(self.model, self.optimizer)
        self.before = None

    def _evaluate(self) -> HeldoutNLL:
        started = time.perf_counter()
        result = heldout_nll(self.model, self.heldout, self.serving_depths, self.dtype)
        self.seconds["evaluation"] += time.perf_counter() - started
        return result

    def _update(
        self,
        depth: int,
        batch: Batch,
        lr: float,
        row_seeds: Sequence[int],
        out: list[torch.Tensor],
    ) -> str | None:
        """Restore the captured state, take one step at `depth`, write Δθ into `out`; return the
        digest of the state the step started from (when recording)."""
        assert self.before is not None
        self.before.restore(self.model, self.optimizer)
        for group in self.optimizer.param_groups:  # before the digest, which includes it
            group["lr"] = lr
        digest = state_digest(self.model, self.optimizer) if self.record_digests else None
        started = time.perf_counter()
        train_step(self.step_context, batch, depth, lr, row_seeds)
        with torch.no_grad():
            for d, p, p0 in zip(out, self.params, self.before.params, strict=True):
                torch.sub(p, p0, out=d)
        self.seconds["updates"] += time.perf_counter() - started
        return digest

    @torch.no_grad()
    def _apply(self, delta: list[torch.Tensor], scale: float) -> None:
        """θ = θ_before + scale · Δθ, in place."""
        assert self.before is not None
        for p, p0, d in zip(self.params, self.before.params, delta, strict=True):
            torch.add(p0, d, alpha=scale, out=p)

    def measure(self, batch: Batch, lr: float, row_seeds: Sequence[int]) -> PairResult:
        """One paired measurement on `batch` (on the model's device) at learning rate `lr`;
        `row_seeds` seed each row's initial recurrent state, the same for both updates."""
        (shallow, deep), (delta_s, delta_d) = self.depths, self.deltas
        digest_s = self._update(shallow, batch, lr, row_seeds, delta_s)
        digest_d = self._update(deep, batch, lr, row_seeds, delta_d)
        rms_s, rms_d = update_rms(delta_s), update_rms(delta_d)
        if rms_s == 0.0 or rms_d == 0.0:
            raise UserError(
                f"an update at depth {shallow if rms_s == 0.0 else deep} changed no parameter "
                f"(learning rate {lr:g}); a zero update has no direction to compare"
            )
        target = reference_rms(rms_s, rms_d, self.reference)
        self._apply(delta_s, target / rms_s)
        nll_s = self._evaluate()
        self._apply(delta_d, target / rms_d)
        nll_d = self._evaluate()
        digests = (digest_s, digest_d) if digest_s is not None and digest_d is not None else None
        return PairResult(nll_s, nll_d, rms_s, rms_d, target, digests)
