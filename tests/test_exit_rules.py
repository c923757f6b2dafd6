"""Each exit rule's stopping logic on hand-computed cases: a tracker is fed the distributions (or
states) of a few iterations of a few rows, and must stop exactly where the arithmetic in the
comments says. (The rules inside cached decoding are checked against recomputation in
test_adaptive.py and test_batching.py.)"""

from __future__ import annotations

import math

import pytest
import torch

from fixedfirst.compute.flops import FlopModel
from fixedfirst.errors import UserError
from fixedfirst.serve.exit_rules import (
    ArgmaxExit,
    EntropyExit,
    KLExit,
    StateExit,
    exit_rule,
)


def logprobs(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log()


def first_stop(rule, iterations: list[tuple[torch.Tensor, torch.Tensor | None]], initial):
    """Per row, the first iteration (1-based) at which the rule stops it, feeding every row at
    every iteration (0: never)."""
    batch = initial.shape[0]
    tracker = rule.tracker(initial, 2)
    stopped = [0] * batch
    for k, (state, lp) in enumerate(iterations, 1):
        stop = tracker.update(torch.arange(batch), state, lp)
        for b in range(batch):
            if stop[b] and not stopped[b]:
                stopped[b] = k
    return stopped


STATES = torch.zeros(3, 2, dtype=torch.float64)  # unused by the distribution rules


def test_kl_rule():
    # p_0 = (0.5, 0.5). Row 0: p_1 = p_0, KL 0: stops at 1. Rows 1 and 2: p_1 = (0.9, 0.1),
    # KL(p_0 || p_1) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5108: no. Row 1: p_2 = p_1, KL 0:
    # stops at 2. Row 2: p_2 = (0.8, 0.2), KL(p_1 || p_2) = 0.9 ln(0.9/0.8) + 0.1 ln(0.1/0.2)
    # = 0.10600 - 0.06931 = 0.03669: below 0.05, above 0.03.
    p1 = logprobs([0.5, 0.5], [0.9, 0.1], [0.9, 0.1])
    p2 = logprobs([0.5, 0.5], [0.9, 0.1], [0.8, 0.2])
    p3 = logprobs([0.5, 0.5], [0.9, 0.1], [0.8, 0.2])
    iterations = [(STATES, p1), (STATES, p2), (STATES, p3)]
    assert first_stop(KLExit(0.05), iterations, STATES) == [1, 2, 2]
    assert first_stop(KLExit(0.03), iterations, STATES) == [1, 2, 3]
    assert first_stop(KLExit(0.0), iterations, STATES) == [0, 0, 0]  # KL < 0 never holds


def test_kl_rule_measures_the_previous_distribution_against_the_new_one():
    # p_0 = (0.5, 0.5), p_1 = (0.99, 0.01): KL(p_0 || p_1) = 0.5 ln(0.5/0.99) + 0.5 ln(0.5/0.01)
    # = 1.614, but KL(p_1 || p_0) = 0.99 ln(0.99/0.5) + 0.01 ln(0.01/0.5) = 0.637. At threshold
    # 1 the rule goes on after iteration 1 and stops at 2, where p_2 = p_1.
    p = logprobs([0.99, 0.01])
    one = STATES[:1]
    assert first_stop(KLExit(1.0), [(one, p), (one, p)], one) == [2]


def test_entropy_rule_stops_on_equal_entropies_even_when_the_distribution_flips():
    # H_0 = ln 2 = 0.69315. p_1 = (0.9, 0.1): H = 0.9 * 0.10536 + 0.1 * 2.30259 = 0.32508,
    # |change| 0.36807: no stop at 0.1. p_2 = (0.1, 0.9): the same entropy, change 0: stops at 2,
    # although the most likely token changed (the KL rule would not stop: KL = 1.7578).
    # Row 1: p_1 = (0.6, 0.4), H = 0.67301, change 0.02014: stops at 1 (below 0.1).
    p1 = logprobs([0.9, 0.1], [0.6, 0.4])
    p2 = logprobs([0.1, 0.9], [0.6, 0.4])
    states = STATES[:2]
    assert first_stop(EntropyExit(0.1), [(states, p1), (states, p2)], states) == [2, 1]
    assert first_stop(EntropyExit(0.02), [(states, p1), (states, p2)], states) == [2, 2]
    assert first_stop(KLExit(0.1), [(states, p1), (states, p2)], states) == [0, 1]


def test_state_rule():
    # s_0 = (3, 4). Row 0: s_1 = (3, 4.1): ||s_1 - s_0|| = 0.1, ||s_1|| = sqrt(25.81) = 5.08035,
    # relative change 0.019684: stops at 1 below 0.02, not below 0.019. Row 1: s_1 = (6, 8),
    # change 5 / 10 = 0.5; s_2 = (6, 8.1), change 0.1 / 10.0802 = 0.00992: stops at 2.
    s0 = torch.tensor([[3.0, 4.0], [3.0, 4.0]], dtype=torch.float64)
    s1 = torch.tensor([[3.0, 4.1], [6.0, 8.0]], dtype=torch.float64)
    s2 = torch.tensor([[3.0, 4.1], [6.0, 8.1]], dtype=torch.float64)
    iterations = [(s1, None), (s2, None)]
    assert first_stop(StateExit(0.02), iterations, s0) == [1, 2]
    assert first_stop(StateExit(0.019), iterations, s0) == [2, 2]
    assert first_stop(StateExit(0.009), iterations, s0) == [2, 0]


def test_argmax_rule():
    # Row 0's argmax over iterations 1..5: 0, 0, 1, 1, 1 (run lengths 1, 2, 1, 2, 3).
    # Row 1's: 1, 0, 1, 0, 1 (never two in a row).
    a = [0.7, 0.3]
    b = [0.3, 0.7]
    sequence = [(a, b), (a, a), (b, b), (b, a), (b, b)]
    iterations = [(STATES[:2], logprobs(*rows)) for rows in sequence]
    assert first_stop(ArgmaxExit(2), iterations, STATES[:2]) == [2, 0]
    assert first_stop(ArgmaxExit(3), iterations, STATES[:2]) == [5, 0]


def test_a_tracker_updates_only_the_rows_it_is_given():
    """Adaptive decoding feeds the rows still iterating only; a row left out keeps its memory."""
    tracker = KLExit(0.01).tracker(STATES[:2], 2)
    tracker.update(torch.tensor([0, 1]), STATES[:2], logprobs([0.9, 0.1], [0.9, 0.1]))
    # Row 1 skips an iteration; it is compared with its own last distribution, not row 0's.
    tracker.update(torch.tensor([0]), STATES[:1], logprobs([0.5, 0.5]))
    assert tracker.update(torch.tensor([1]), STATES[:1], logprobs([0.9, 0.1])).tolist() == [True]


def test_modeled_flops_count_a_readout_per_iteration_unless_the_rule_reads_the_state():
    flops = FlopModel(prelude=10.0, iteration=4.0, readout=3.0)
    assert KLExit().modeled_flops(flops, 2.5) == 10 + 2.5 * (4 + 3)
    assert StateExit().modeled_flops(flops, 2.5) == 10 + 2.5 * 4 + 3


@pytest.mark.parametrize(
    ("name", "threshold", "fragment"),
    [
        ("kl", -1.0, "the KL threshold must be a finite number >= 0"),
        ("entropy", math.nan, "the entropy threshold must be a finite number >= 0"),
        ("state", math.inf, "the state-change threshold must be a finite number >= 0"),
        ("argmax", 1, "must be an integer >= 2"),
        ("argmax", 2.5, "must be an integer >= 2"),
        ("latent", 0.1, "unknown exit rule 'latent'; choose one of kl, entropy, state, argmax"),
    ],
)
def test_bad_rules_are_refused(name, threshold, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(")):
        exit_rule(name, threshold)


def test_defaults():
    assert exit_rule("kl").threshold == 1e-3 and exit_rule("argmax", max_depth=8).max_depth == 8
    assert "same argmax 3x" in exit_rule("argmax").describe()
