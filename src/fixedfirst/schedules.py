"""Depth schedules: which recurrent depth K each optimizer step trains at (DESIGN.md §4).

A schedule is data: for a run of `total_steps` steps it is a list of `Stage`s, each a range of
steps and the depth distribution used there (the modded-nanogpt pattern). The depth of a step is
drawn from its stage's distribution with a generator seeded by (seed, step) only, so every rank,
every micro-batch and a resumed run draw the same K, whatever happened before. Each distribution
knows its exact probability mass function, so the expected training cost of a schedule is a sum,
not a simulation.

Kinds:
  fixed(K)                 K every step.
  uniform(k_min, k_max)    K ~ U{k_min..k_max} (Geiping et al. 2025: 1..16, mean 8.5).
  poisson-lognormal(mean)  rate ~ LogNormal(mu, sigma), K = 1 + Poisson(rate), clipped at k_max;
                           mu = ln(mean - 1) - sigma^2/2 so that E[rate] = mean - 1 and, before the
                           clip, E[K] = mean (Huginn's parameterisation, named by the mean depth).
  progressive(mean)        McLeish et al. 2025: the Poisson-lognormal mean ramps from 1 to `mean`
                           over the first `warmup` of the steps, m(t) = max(1, ceil(mean * f(x)))
                           with x = t / warmup_steps and f(x) = x or 1 - sqrt(1 - x).
  fixed-first(K0, switch)  K0 while step < switch * total_steps, then the finish distribution
                           (uniform k_min..k_max, or Poisson-lognormal with `mean`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fixedfirst.config import ScheduleConfig

_QUADRATURE_NODES = 160  # Gauss-Hermite nodes for the log-normal mixture: error far below 1e-12


class DepthDistribution(ABC):
    """A distribution over depths K >= 1 with an exact pmf."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> int: ...

    @abstractmethod
    def pmf(self) -> dict[int, float]: ...

    def expectation(self, fn: Callable[[int], float]) -> float:
        return sum(p * fn(k) for k, p in self.pmf().items())

    @property
    def mean(self) -> float:
        return self.expectation(float)

    @property
    def max_depth(self) -> int:
        return max(self.pmf())


@dataclass(frozen=True)
class Fixed(DepthDistribution):
    depth: int

    def sample(self, rng: np.random.Generator) -> int:
        return self.depth

    def pmf(self) -> dict[int, float]:
        return {self.depth: 1.0}

    def __str__(self) -> str:
        return f"K={self.depth}"


@dataclass(frozen=True)
class Uniform(DepthDistribution):
    k_min: int
    k_max: int

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.k_min, self.k_max + 1))

    def pmf(self) -> dict[int, float]:
        n = self.k_max - self.k_min + 1
        return {k: 1.0 / n for k in range(self.k_min, self.k_max + 1)}

    def __str__(self) -> str:
        return f"K~U{{{self.k_min}..{self.k_max}}}"


@dataclass(frozen=True)
class PoissonLogNormal(DepthDistribution):
    """K = 1 + Poisson(rate), rate ~ LogNormal(ln(mean - 1) - sigma^2/2, sigma), clipped."""

    mean_depth: float
    sigma: float
    k_max: int

    @property
    def mu(self) -> float:
        return math.log(self.mean_depth - 1) - self.sigma**2 / 2

    def sample(self, rng: np.random.Generator) -> int:
        rate = rng.lognormal(self.mu, self.sigma)
        return min(1 + int(rng.poisson(rate)), self.k_max)

    def pmf(self) -> dict[int, float]:
        return dict(self._pmf)

    @cached_property
    def _pmf(self) -> dict[int, float]:
        # P(K = k) = E_Z[Poisson(k - 1; exp(mu + sigma Z))], Z ~ N(0, 1), by Gauss-Hermite
        # quadrature (probabilists' weights sum to sqrt(2 pi)); the tail above k_max goes to k_max.
        z, w = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
        w = w / w.sum()
        rate = np.exp(self.mu + self.sigma * z)
        out: dict[int, float] = {}
        for k in range(1, self.k_max):
            n = k - 1
            log_p = n * np.log(rate) - rate - math.lgamma(n + 1)
            out[k] = float(np.dot(w, np.exp(log_p)))
        out[self.k_max] = max(0.0, 1.0 - sum(out.values()))
        return out

    def __str__(self) -> str:
        return f"K~PLN(mean={self.mean_depth:g},sigma={self.sigma:g},max={self.k_max})"


def poisson_lognormal(mean: float, sigma: float, k_max: int) -> DepthDistribution:
    """The mean-1 case is K = 1 always (rate 0), which the log-normal cannot express."""
    if mean <= 1.0:
        return Fixed(1)
    return PoissonLogNormal(mean, sigma, k_max)


@dataclass(frozen=True)
class Stage:
    """Steps [start, end) draw their depth from `dist`; `phase` names the stage in metrics."""

    start: int
    end: int
    dist: DepthDistribution
    phase: str

    @property
    def steps(self) -> int:
        return self.end - self.start


class Schedule:
    """A depth schedule built from its configuration and the run's seed."""

    def __init__(self, config: ScheduleConfig, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self._stages: dict[int, list[Stage]] = {}

    def __repr__(self) -> str:
        return f"Schedule({describe(self.config)}, seed={self.seed})"

    def switch_step(self, total_steps: int) -> int | None:
        """fixed-first: the first step of the finishing stage (None for other kinds)."""
        if self.config.kind != "fixed-first":
            return None
        # Step t trains at K0 while t < switch * total_steps; the guard absorbs float round-off
        # such as 0.67 * 100 = 67.00000000000001.
        return min(total_steps, math.ceil(self.config.switch * total_steps - 1e-9))

    def _finish(self) -> DepthDistribution:
        c = self.config
        if c.finish == "uniform":
            return Uniform(c.k_min, c.k_max)
        return poisson_lognormal(c.mean_depth, c.sigma, c.k_max)

    def stages(self, total_steps: int) -> list[Stage]:
        """The schedule over a run of `total_steps` steps, as consecutive non-empty stages."""
        if total_steps not in self._stages:
            self._stages[total_steps] = self._build_stages(total_steps)
        return self._stages[total_steps]

    def _build_stages(self, total_steps: int) -> list[Stage]:
        c = self.config
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        if c.kind == "fixed":
            stages = [Stage(0, total_steps, Fixed(c.depth), "fixed")]
        elif c.kind == "uniform":
            stages = [Stage(0, total_steps, Uniform(c.k_min, c.k_max), "uniform")]
        elif c.kind == "poisson-lognormal":
            dist = poisson_lognormal(c.mean_depth, c.sigma, c.k_max)
            stages = [Stage(0, total_steps, dist, "poisson-lognormal")]
        elif c.kind == "fixed-first":
            switch = self.switch_step(total_steps)
            assert switch is not None
            stages = [
                Stage(0, switch, Fixed(c.k0), "fixed"),
                Stage(switch, total_steps, self._finish(), "finish"),
            ]
        elif c.kind == "progressive":
            stages = self._progressive_stages(total_steps)
        else:  # pragma: no cover - the config validation makes this unreachable
            raise ValueError(f"unknown schedule kind {c.kind!r}")
        return [s for s in stages if s.steps > 0]

    def progressive_mean(self, step: int, total_steps: int) -> float:
        """McLeish et al.'s curriculum: the Poisson-lognormal mean at `step`."""
        c = self.config
        ramp_steps = c.warmup * total_steps
        if step >= ramp_steps:
            return c.mean_depth
        x = step / ramp_steps
        f = x if c.ramp == "linear" else 1.0 - math.sqrt(1.0 - x)
        return min(c.mean_depth, max(1, math.ceil(c.mean_depth * f)))

    def _progressive_stages(self, total_steps: int) -> list[Stage]:
        c = self.config
        stages: list[Stage] = []
        start = 0
        current = self.progressive_mean(0, total_steps)
        for step in range(1, total_steps + 1):
            mean = self.progressive_mean(step, total_steps) if step < total_steps else None
            if mean != current:
                phase = "full" if current == c.mean_depth else "ramp"
                dist = poisson_lognormal(current, c.sigma, c.k_max)
                stages.append(Stage(start, step, dist, phase))
                start, current = step, mean  # type: ignore[assignment]
        return stages

    def stage_at(self, step: int, total_steps: int) -> Stage:
        if not 0 <= step < total_steps:
            raise ValueError(f"step {step} outside 0..{total_steps - 1}")
        for stage in self.stages(total_steps):
            if stage.start <= step < stage.end:
                return stage
        raise AssertionError("stages do not cover every step")  # pragma: no cover

    def depth(self, step: int, total_steps: int) -> int:
        """The training depth of `step`: a pure function of (seed, step, total_steps)."""
        stage = self.stage_at(step, total_steps)
        return stage.dist.sample(np.random.default_rng([self.seed, step]))

    def depths(self, total_steps: int) -> list[int]:
        """Every step's depth, in order (the same values `depth` gives one at a time)."""
        out: list[int] = []
        for stage in self.stages(total_steps):
            out.extend(
                stage.dist.sample(np.random.default_rng([self.seed, step]))
                for step in range(stage.start, stage.end)
            )
        return out

    def expected_total(self, fn: Callable[[int], float], total_steps: int) -> float:
        """Exact E[sum over steps of fn(K_step)]: e.g. fn = training FLOPs per step at depth K."""
        return sum(s.steps * s.dist.expectation(fn) for s in self.stages(total_steps))


def describe(config: ScheduleConfig) -> str:
    """A short human name for a schedule configuration, used in tables and legends."""
    c = config
    if c.kind == "fixed":
        return f"fixed K={c.depth}"
    if c.kind == "uniform":
        return f"uniform {c.k_min}..{c.k_max}"
    if c.kind == "poisson-lognormal":
        return f"poisson-lognormal mean {c.mean_depth:g}"
    if c.kind == "progressive":
        return f"progressive to mean {c.mean_depth:g} ({c.ramp}, {c.warmup:g})"
    finish = f"uniform {c.k_min}..{c.k_max}" if c.finish == "uniform" else "poisson-lognormal"
    return f"fixed-first K0={c.k0} switch {c.switch:g} -> {finish}"
