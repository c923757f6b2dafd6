"""Exact-match accuracy on the chains evaluation set, by serving depth and by difficulty.

A label is right when the argmax of the model's output at its position is the chain's value.
Every evaluation sequence has one label of each difficulty 0..eval_ops (on its long chain), so
accuracy at difficulty d is a mean over independent sequences, and a band of difficulties is
scored per sequence (the share of its labels in the band that are right) before averaging, which
keeps the sequences the unit of the 95% intervals. All serving depths come from one pass of the
recurrence (`logits_by_depth`).

The KL exit rule (`fixedfirst.serve.KLExit`) is scored on the same labels: each position of each
sequence iterates until its output distribution settles, and we report the accuracy and the depth
it used per difficulty: whether the model spends more iterations on harder labels. `ExitAccuracy`
scores any way of serving (a fixed depth, any exit rule) for the exit frontier
(`fixedfirst.serve.frontier`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedLM, LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.serve.adaptive import KLExit, teacher_forced_kl_exit
from fixedfirst.serve.frontier import Scored
from fixedfirst.serve.modes import Adaptive
from fixedfirst.serve.pareto import QualityMeasure
from fixedfirst.tasks.chains.bands import bands_of
from fixedfirst.tasks.chains.program import ChainsOptions
from fixedfirst.tasks.chains.source import EvaluationSet


@dataclass
class Correctness:
    """correct[k, n, d]: was sequence n's label of difficulty d right at the k-th depth."""

    depths: list[int]
    correct: np.ndarray

    def accuracy(self) -> dict[int, list[float]]:
        """depth -> accuracy at each difficulty 0..eval_ops."""
        means = self.correct.mean(axis=1)
        return {depth: means[k].tolist() for k, depth in enumerate(self.depths)}

    def band_scores(self, low: int, high: int) -> np.ndarray:
        """(depths, sequences): each sequence's share of right labels with difficulty in
        low..high."""
        return self.correct[:, :, low : high + 1].mean(axis=2)


def band_table(correct: Correctness, options: ChainsOptions) -> dict[str, Any]:
    """Accuracy per difficulty at every depth, and each band's mean per depth: how every study of
    the chains task reads a run's correctness (its scores, cached beside the run)."""
    bands = {}
    for band in bands_of(options):
        means = correct.band_scores(band.low, band.high).mean(axis=1)
        bands[band.label] = {
            "low": band.low,
            "high": band.high,
            "in_range": band.in_range,
            "by_depth": {str(d): float(means[k]) for k, d in enumerate(correct.depths)},
        }
    return {
        "accuracy": {str(d): a for d, a in correct.accuracy().items()},
        "bands": bands,
    }


@torch.no_grad()
def correctness_by_depth(
    model: LoopedLM, evaluation: EvaluationSet, depths: list[int], batch_size: int = 256
) -> Correctness:
    """Right or wrong for every (depth, sequence, difficulty): one pass per batch of our model,
    one forward per depth of another's (`LoopedLM.logits_by_depth`)."""
    was_training = model.training
    model.eval()
    wanted = sorted(set(depths))
    rows = []
    try:
        for start in range(0, evaluation.sequences, batch_size):
            inputs = evaluation.batch.inputs[start : start + batch_size]
            targets = evaluation.batch.targets[start : start + batch_size]
            positions = evaluation.positions[start : start + batch_size]
            expected = targets.gather(1, positions)
            per_depth = []
            for _, logits in model.logits_by_depth(inputs, wanted):
                predicted = logits.argmax(dim=-1).gather(1, positions)
                per_depth.append((predicted == expected).numpy())
            rows.append(np.stack(per_depth))
    finally:
        model.train(was_training)
    return Correctness(wanted, np.concatenate(rows, axis=1))


@dataclass
class ExitResult:
    """The KL exit rule per difficulty: accuracy and mean depth used (means over sequences)."""

    threshold: float
    max_depth: int
    accuracy: list[float]
    mean_depth: list[float]

    def to_dict(self) -> dict:
        return vars(self).copy()


@torch.no_grad()
def kl_exit_by_difficulty(
    model: LoopedTransformer, evaluation: EvaluationSet, rule: KLExit, batch_size: int = 256
) -> ExitResult:
    """Every position decoded under the exit rule (teacher-forced: each sees the true inputs)."""
    was_training = model.training
    model.eval()
    right, used = [], []
    try:
        for start in range(0, evaluation.sequences, batch_size):
            inputs = evaluation.batch.inputs[start : start + batch_size]
            targets = evaluation.batch.targets[start : start + batch_size]
            positions = evaluation.positions[start : start + batch_size]
            logits, depths = teacher_forced_kl_exit(model, inputs, Adaptive(rule))
            predicted = logits.argmax(dim=-1).gather(1, positions)
            right.append((predicted == targets.gather(1, positions)).numpy())
            used.append(depths.gather(1, positions).numpy())
    finally:
        model.train(was_training)
    right_all, used_all = np.concatenate(right), np.concatenate(used)
    return ExitResult(
        rule.threshold,
        rule.max_depth,
        right_all.mean(axis=0).tolist(),
        used_all.mean(axis=0).tolist(),
    )


CHAINS_ACCURACY = QualityMeasure(
    "accuracy", "share of in-range labels right", "higher", 0.01, relative=False
)
"""The exit frontier's quality on chains: exact-match accuracy on the long chain's labels of
the training range (difficulty 0..max_ops), each sequence's share first; a point matches the best
fixed depth within 1 accuracy point."""


class ExitAccuracy:
    """The exit frontier's scorer on the chains evaluation set (`serve.frontier.HeldOutScorer`):
    accuracy in the training range, and accuracy and depth per difficulty and per band. The
    depth per token is over every scored position (every statement is decoded), the accuracy
    over the long chain's labels."""

    measure = CHAINS_ACCURACY

    def __init__(self, evaluation: EvaluationSet, options: ChainsOptions, batch_size: int = 256):
        self.options = options
        self.positions = [
            evaluation.positions[i : i + batch_size]
            for i in range(0, evaluation.sequences, batch_size)
        ]
        self.batches = [
            Batch(
                evaluation.batch.inputs[i : i + batch_size],
                evaluation.batch.targets[i : i + batch_size],
            )
            for i in range(0, evaluation.sequences, batch_size)
        ]

    def tally(self, index: int, logits: torch.Tensor, depths: torch.Tensor) -> tuple:
        batch = self.batches[index]
        positions = self.positions[index].to(logits.device)
        targets = batch.targets.to(logits.device)
        right = logits.argmax(-1).gather(1, positions) == targets.gather(1, positions)
        scored = targets != IGNORE_INDEX
        return (
            right.cpu().numpy(),
            depths.gather(1, positions).cpu().numpy(),
            float(depths[scored].sum()),
            int(scored.sum()),
        )

    def summary(self, tallies: list[tuple]) -> Scored:
        right = np.concatenate([t[0] for t in tallies]).astype(np.float64)
        used = np.concatenate([t[1] for t in tallies]).astype(np.float64)
        depth_sum, count = sum(t[2] for t in tallies), sum(t[3] for t in tallies)
        in_range = float(right[:, : self.options.max_ops + 1].mean(axis=1).mean())
        bands = {
            band.label: {
                "accuracy": float(right[:, band.low : band.high + 1].mean(axis=1).mean()),
                "mean_depth": float(used[:, band.low : band.high + 1].mean()),
            }
            for band in bands_of(self.options)
        }
        details = {
            "tokens": count,
            "bands": bands,
            "accuracy_by_difficulty": right.mean(axis=0).tolist(),
        }
        return Scored(in_range, depth_sum / count, details)
