"""Depth schedules: which recurrent depth K each optimizer step trains at (docs/design.md §2).

A schedule is data: a list of `Stage`s, each a range of steps and a depth distribution. A step's
depth is drawn with a generator seeded by (seed, step) only, so every rank, micro-batch and
resume draws the same K; each distribution knows its exact pmf, so a run's depth histogram, of
the depths it draws or expected, is exact, and what it costs is a sum over depths, not a
simulation. The kinds (fixed, uniform, poisson-lognormal, progressive, fixed-first)
are tabulated in §2; an auto switch hands its step over through `with_switch_step` (§14).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

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


@lru_cache(maxsize=1)
def _quadrature() -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and normalised weights: computed once, since each computation is an
    eigenvalue problem of the nodes' size and a progressive ramp solves for dozens of rates."""
    z, w = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
    return z, w / w.sum()


def _clipped_pmf(rate: float, sigma: float, k_max: int) -> dict[int, float]:
    """P(K = k) for K = min(1 + Poisson(R), k_max), R ~ LogNormal(ln rate - sigma^2/2, sigma).

    P(1 + Poisson(R) = k) = E_Z[Poisson(k - 1; exp(mu + sigma Z))], Z ~ N(0, 1), by Gauss-Hermite
    quadrature (probabilists' weights, normalised); the tail above k_max goes to k_max.
    """
    z, w = _quadrature()
    mu = math.log(rate) - sigma**2 / 2
    rates = np.exp(mu + sigma * z)
    out: dict[int, float] = {}
    for k in range(1, k_max):
        n = k - 1
        log_p = n * np.log(rates) - rates - math.lgamma(n + 1)
        out[k] = float(np.dot(w, np.exp(log_p)))
    out[k_max] = max(0.0, 1.0 - sum(out.values()))
    return out


def _clipped_mean(rate: float, sigma: float, k_max: int) -> float:
    return sum(k * p for k, p in _clipped_pmf(rate, sigma, k_max).items())


@lru_cache(maxsize=256)
def solve_rate(mean_depth: float, sigma: float, k_max: int) -> float:
    """The pre-clip mean rate r whose clipped depth K = min(1 + Poisson(R), k_max) has
    E[K] = mean_depth. E[K] rises monotonically from 1 (r -> 0) towards k_max (r -> inf), so
    bisection on log r finds it to machine precision."""
    if not 1.0 < mean_depth < k_max:
        raise ValueError(f"mean depth {mean_depth} must lie strictly between 1 and {k_max}")
    lo, hi = math.log(1e-9), math.log(max(1.0, mean_depth))
    while _clipped_mean(math.exp(hi), sigma, k_max) < mean_depth:
        lo, hi = hi, hi + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _clipped_mean(math.exp(mid), sigma, k_max) < mean_depth:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp((lo + hi) / 2)


@dataclass(frozen=True)
class PoissonLogNormal(DepthDistribution):
    """K = min(1 + Poisson(R), k_max), R ~ LogNormal(ln r - sigma^2/2, sigma), E[K] = mean_depth.

    Huginn names the pre-clip rate: E[R] = r, so before the clip E[K] = r + 1. The clip at k_max
    pulls the mean below that (r = 7.5 gives E[K] = 8.19 at k_max = 16, not 8.5), and a schedule
    compared with uniform 1..16 must train at the same mean depth, so `mean_depth` here is the
    true mean after the clip and r is solved for (`rate`).
    """

    mean_depth: float
    sigma: float
    k_max: int

    @cached_property
    def rate(self) -> float:
        """The pre-clip mean rate r that gives E[K] = mean_depth after the clip."""
        return solve_rate(self.mean_depth, self.sigma, self.k_max)

    @property
    def mu(self) -> float:
        return math.log(self.rate) - self.sigma**2 / 2

    def sample(self, rng: np.random.Generator) -> int:
        rate = rng.lognormal(self.mu, self.sigma)
        return min(1 + int(rng.poisson(rate)), self.k_max)

    def pmf(self) -> dict[int, float]:
        return dict(self._pmf)

    @cached_property
    def _pmf(self) -> dict[int, float]:
        return _clipped_pmf(self.rate, self.sigma, self.k_max)

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


DRAW_TABLES_KEPT = 32
"""How many (seed, distribution) tables of drawn depths the process keeps for the next schedule
that asks (the oldest goes first; a schedule keeps the tables it uses)."""
_draw_tables: OrderedDict[tuple[int, DepthDistribution], dict[int, int]] = OrderedDict()


def shared_draws(seed: int, dist: DepthDistribution) -> dict[int, int]:
    """step -> the depth `dist` draws there under `seed`, shared by every schedule of this process:
    a depth is a pure function of (seed, distribution, step), and planning a sweep builds a
    schedule per run and per candidate length, whose finishing stages draw the same depths (the
    lm-1b sweep drew 253,426 depths for 74,180 distinct ones)."""
    key = (seed, dist)
    table = _draw_tables.get(key)
    if table is None:
        table = _draw_tables[key] = {}
        if len(_draw_tables) > DRAW_TABLES_KEPT:
            _draw_tables.popitem(last=False)
    else:
        _draw_tables.move_to_end(key)
    return table


def fraction_step(fraction: float, total_steps: int) -> int:
    """The first step at or after `fraction` of a run: ceil(fraction * total_steps), with a guard
    against float round-off (0.07 * 100 = 7.000000000000001 in doubles, and is step 7)."""
    return min(total_steps, math.ceil(fraction * total_steps - 1e-9))


class Schedule:
    """A depth schedule built from its configuration and the run's seed."""

    def __init__(
        self, config: ScheduleConfig, seed: int = 0, decided_switch_step: int | None = None
    ) -> None:
        """decided_switch_step: for `switch = "auto"`, the first finishing step the run decided
        on (None: not decided yet, so every step so far trains at K0; docs/design.md §14)."""
        self.config = config
        self.seed = seed
        self.decided_switch_step = decided_switch_step
        self._stages: dict[int, list[Stage]] = {}
        self._draws: dict[DepthDistribution, dict[int, int]] = {}

    def __repr__(self) -> str:
        return f"Schedule({describe(self.config)}, seed={self.seed})"

    def with_switch_step(self, step: int) -> Schedule:
        """This auto-switch schedule with its switch decided: steps from `step` on finish. Every
        depth is still drawn from (seed, step), so they are the depths a fixed switch at the
        same step draws."""
        switched = Schedule(self.config, self.seed, step)
        switched._draws = self._draws
        return switched

    def switch_step(self, total_steps: int) -> int | None:
        """fixed-first: the first step of the finishing stage (None for other kinds, and for an
        auto switch not decided yet)."""
        if self.config.kind != "fixed-first":
            return None
        fraction = self.config.switch_fraction
        if fraction is None:  # auto: the run's decision, if any
            decided = self.decided_switch_step
            return None if decided is None else min(total_steps, decided)
        # Step t trains at K0 while t < switch * total_steps (fraction_step's guard absorbs
        # round-off such as 0.07 * 100 = 7.000000000000001).
        return fraction_step(fraction, total_steps)

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
            if switch is None:  # an auto switch not decided yet: K0 so far
                switch = total_steps
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
        """One stage per run of steps with the same mean. The mean never falls as the steps go
        on, so each run's end is found by bisection: a few dozen means for a plan of a million
        steps (planning costs the schedule at MAX_STEPS), instead of one per step."""
        c = self.config
        stages: list[Stage] = []
        start = 0
        while start < total_steps:
            current = self.progressive_mean(start, total_steps)
            same, other = start, total_steps  # mean(same) == current; other: past it, or the end
            while other - same > 1:
                mid = (same + other) // 2
                if self.progressive_mean(mid, total_steps) == current:
                    same = mid
                else:
                    other = mid
            phase = "full" if current == c.mean_depth else "ramp"
            stages.append(Stage(start, other, poisson_lognormal(current, c.sigma, c.k_max), phase))
            start = other
        return stages

    def stage_at(self, step: int, total_steps: int) -> Stage:
        if not 0 <= step < total_steps:
            raise ValueError(f"step {step} outside 0..{total_steps - 1}")
        for stage in self.stages(total_steps):
            if stage.start <= step < stage.end:
                return stage
        raise AssertionError("stages do not cover every step")  # pragma: no cover

    def _draw(self, dist: DepthDistribution, step: int) -> int:
        """The depth `dist` gives step `step`, drawn from a generator seeded by (seed, step).

        Memoised in the process (`shared_draws`): planning a compute-matched run evaluates the
        realised cost of many candidate run lengths, and every one of them draws the same depths
        for the steps they share."""
        return self._drawn(dist, self._table(dist), step)

    def _table(self, dist: DepthDistribution) -> dict[int, int]:
        table = self._draws.get(dist)
        if table is None:
            table = self._draws[dist] = shared_draws(self.seed, dist)
        return table

    def _drawn(self, dist: DepthDistribution, drawn: dict[int, int], step: int) -> int:
        """`_draw` with the distribution's memo already looked up (hashing the frozen dataclass
        once per stage, not once per step, is most of a compute-matched plan's time)."""
        if step not in drawn:
            drawn[step] = dist.sample(np.random.default_rng([self.seed, step]))
        return drawn[step]

    def depth(self, step: int, total_steps: int) -> int:
        """The training depth of `step`: a pure function of (seed, step, total_steps)."""
        return self._draw(self.stage_at(step, total_steps).dist, step)

    def depths(self, total_steps: int) -> list[int]:
        """Every step's depth, in order (the same values `depth` gives one at a time)."""
        return [
            self._draw(stage.dist, step)
            for stage in self.stages(total_steps)
            for step in range(stage.start, stage.end)
        ]

    def histogram(self, total_steps: int) -> DepthHistogram:
        """How many steps train at each depth, for the depths this run draws: known before the
        run starts, since every depth is a pure function of (seed, step, total_steps)."""
        parts: list[tuple[int, dict[int, float]]] = []
        for stage in self.stages(total_steps):
            if isinstance(stage.dist, Fixed):  # nothing to draw (a generator costs ~12 us)
                parts.append((1, {stage.dist.depth: stage.steps}))
                continue
            drawn = self._table(stage.dist)
            counts = Counter(
                self._drawn(stage.dist, drawn, step) for step in range(stage.start, stage.end)
            )
            parts.append((1, dict(counts)))
        return DepthHistogram(tuple(parts))

    def expected_histogram(self, total_steps: int) -> DepthHistogram:
        """The schedule as a distribution: each stage's steps and the exact pmf of its depths."""
        return DepthHistogram(tuple((s.steps, s.dist.pmf()) for s in self.stages(total_steps)))


@dataclass(frozen=True)
class DepthHistogram:
    """How a run's steps spread over depths, as parts of (steps, share of them at each depth):
    the depths a run draws are a part per stage of weight 1 whose shares are counts, the
    schedule's expectation a part per stage of its steps whose shares are its pmf. A cost is
    then a sum over depths (`total`), computed in the same order as the expectation per stage;
    a count times an integer cost per step is exact, so costing the draws of a run is too."""

    parts: tuple[tuple[int, dict[int, float]], ...]

    def total(self, per_step: Callable[[int], float]) -> float:
        """The sum over the run's steps of `per_step(depth)` (e.g. training FLOPs per token)."""
        return float(
            sum(
                steps * sum(share * per_step(k) for k, share in shares.items())
                for steps, shares in self.parts
            )
        )

    def steps(self) -> dict[int, float]:
        """Steps (expected, for the expectation) at each depth, deepest last."""
        out: dict[int, float] = {}
        for steps, shares in self.parts:
            for k, share in shares.items():
                out[k] = out.get(k, 0) + steps * share
        return dict(sorted(out.items()))


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
    switch = "auto" if c.switch_fraction is None else f"{c.switch_fraction:g}"
    return f"fixed-first K0={c.k0} switch {switch} -> {finish}"
