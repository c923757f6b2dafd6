"""Exit rules: when a token stops iterating the core (docs/design.md §12).

After core iteration k of a new token a rule says, per batch row, whether to stop there; every
rule stops at max_depth at the latest. `kl`, `entropy`, `state` and `argmax` differ in what they
look at and so in what they cost (§12 tabulates them). A rule is a frozen dataclass (threshold,
max_depth) that makes one `ExitTracker` per decoded position, holding what the rule remembers
between iterations. Adding a rule is a class here and a line in EXIT_RULES.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch

from fixedfirst.compute.flops import FlopModel
from fixedfirst.errors import UserError
from fixedfirst.model import check_depth


class ExitTracker(ABC):
    """What a rule remembers about each row of a batch while one position iterates."""

    @abstractmethod
    def update(
        self, rows: torch.Tensor, state: torch.Tensor, logprobs: torch.Tensor | None
    ) -> torch.Tensor:
        """After an iteration of the rows `rows` (1-D indices): their states (R, d) and, for a
        rule that reads out, their next-token log-probabilities (R, V). Returns (R,) bool: which
        of them stop here."""


@dataclass(frozen=True)
class ExitRule(ABC):
    threshold: float
    max_depth: int = 16

    name: ClassVar[str]
    """The rule's name on the command line (`--exit NAME`)."""
    label: ClassVar[str]
    reads_out: ClassVar[bool] = True
    """Whether the rule needs the next-token distribution after every iteration."""

    def __post_init__(self) -> None:
        self._check_threshold()
        check_depth(self.max_depth)

    def _check_threshold(self) -> None:
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise UserError(f"the {self.label} threshold must be a finite number >= 0, got {t!r}")

    def describe(self) -> str:
        return f"{self.label} exit (threshold {self.threshold:g}, max depth {self.max_depth})"

    def modeled_flops(self, flops: FlopModel, mean_depth: float) -> float:
        """Forward FLOPs per token at this mean depth: prelude + k iterations, plus a readout
        per iteration for a rule that reads out at every one, else one readout."""
        readouts = mean_depth if self.reads_out else 1.0
        return flops.prelude + mean_depth * flops.iteration + readouts * flops.readout

    @abstractmethod
    def tracker(self, initial_state: torch.Tensor, vocab: int) -> ExitTracker:
        """A fresh tracker for a batch whose rows start from initial_state (B, d)."""


def kl_divergence(prev_logprobs: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """KL(prev || current) per row of (B, V) log-probabilities, clamped at 0 (rounding can make
    the KL of two equal distributions -1e-9)."""
    return (prev_logprobs.exp() * (prev_logprobs - logprobs)).sum(-1).clamp_min(0.0)


def entropy(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) per row of (B, V) log-probabilities."""
    return -(logprobs.exp() * logprobs).sum(-1)


class _Previous(ExitTracker):
    """Keeps one measurement per row from the previous iteration (`first` before the first)
    and stops a row when `settled(previous, current)`."""

    def __init__(self, first: torch.Tensor, measure, settled) -> None:
        self.previous, self.measure, self.settled = first, measure, settled

    def update(self, rows, state, logprobs):
        current = self.measure(state, logprobs)
        stop = self.settled(self.previous[rows], current)
        self.previous[rows] = current.to(self.previous.dtype)
        return stop


def _uniform(batch: int, vocab: int, device: torch.device) -> torch.Tensor:
    return torch.full((batch, vocab), -math.log(vocab), device=device)


@dataclass(frozen=True)
class KLExit(ExitRule):
    threshold: float = 1e-3
    name: ClassVar[str] = "kl"
    label: ClassVar[str] = "KL"

    def tracker(self, initial_state, vocab):
        uniform = _uniform(initial_state.shape[0], vocab, initial_state.device)
        return _Previous(
            uniform,
            lambda state, logprobs: logprobs,
            lambda prev, cur: kl_divergence(prev, cur) < self.threshold,
        )


@dataclass(frozen=True)
class EntropyExit(ExitRule):
    threshold: float = 1e-2
    name: ClassVar[str] = "entropy"
    label: ClassVar[str] = "entropy"

    def tracker(self, initial_state, vocab):
        first = torch.full((initial_state.shape[0],), math.log(vocab), device=initial_state.device)
        return _Previous(
            first,
            lambda state, logprobs: entropy(logprobs),
            lambda prev, cur: (cur - prev).abs() < self.threshold,
        )


def relative_change(previous: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """||state - previous|| / ||state|| per row of (B, d) states (0 where both are zero)."""
    size = torch.linalg.vector_norm(state, dim=-1)
    step = torch.linalg.vector_norm(state - previous, dim=-1)
    return step / size.clamp_min(torch.finfo(state.dtype).tiny)


@dataclass(frozen=True)
class StateExit(ExitRule):
    threshold: float = 3e-2
    name: ClassVar[str] = "state"
    label: ClassVar[str] = "state-change"
    reads_out: ClassVar[bool] = False

    def tracker(self, initial_state, vocab):
        return _Previous(
            initial_state.clone(),
            lambda state, logprobs: state,
            lambda prev, cur: relative_change(prev, cur) < self.threshold,
        )


class _ArgmaxTracker(ExitTracker):
    def __init__(self, batch: int, needed: int, device: torch.device) -> None:
        self.last = torch.full((batch,), -1, dtype=torch.long, device=device)
        self.run = torch.zeros(batch, dtype=torch.long, device=device)
        self.needed = needed

    def update(self, rows, state, logprobs):
        assert logprobs is not None
        top = logprobs.argmax(-1)
        run = torch.where(top == self.last[rows], self.run[rows] + 1, 1)
        self.last[rows], self.run[rows] = top, run
        return run >= self.needed


@dataclass(frozen=True)
class ArgmaxExit(ExitRule):
    """threshold = n, the number of consecutive iterations (n >= 2) whose argmax must agree."""

    threshold: float = 3
    name: ClassVar[str] = "argmax"
    label: ClassVar[str] = "argmax"

    def _check_threshold(self) -> None:
        t = self.threshold
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float))
            or not math.isfinite(t)
            or t != int(t)
            or t < 2
        ):
            raise UserError(
                "the argmax threshold (iterations the argmax must hold) must be an integer "
                f">= 2, got {t!r}"
            )

    def describe(self) -> str:
        return f"argmax exit (same argmax {int(self.threshold)}x, max depth {self.max_depth})"

    def tracker(self, initial_state, vocab):
        return _ArgmaxTracker(initial_state.shape[0], int(self.threshold), initial_state.device)


class DefaultedRule(Protocol):
    """A rule class whose threshold has a default, which `--exit NAME` alone uses."""

    def __call__(self, threshold: float = ..., max_depth: int = ...) -> ExitRule: ...


EXIT_RULES: dict[str, DefaultedRule] = {
    KLExit.name: KLExit,
    EntropyExit.name: EntropyExit,
    StateExit.name: StateExit,
    ArgmaxExit.name: ArgmaxExit,
}


def exit_rule(name: str, threshold: float | None = None, max_depth: int = 16) -> ExitRule:
    """The rule called `name` with this threshold (None: its default) and max_depth."""
    if name not in EXIT_RULES:
        raise UserError(f"unknown exit rule {name!r}; choose one of {', '.join(EXIT_RULES)}")
    rule = EXIT_RULES[name]
    return rule(max_depth=max_depth) if threshold is None else rule(threshold, max_depth)
