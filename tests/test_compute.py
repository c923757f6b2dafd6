"""The compute model against torch's FlopCounterMode, and against the paper's three figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fixedfirst.compute import flop_model, modeled_savings, plan_budget, plan_steps, schedule_flops
from fixedfirst.config import load_config
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.schedules import Schedule
from tests.conftest import tiny_model_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"mlp": "gelu", "injection": "add"},
        {"n_prelude": 2, "n_coda": 0, "tie_embeddings": True},
    ],
)
@pytest.mark.parametrize(("depth", "grad_depth"), [(1, None), (4, None), (7, 2), (3, 8)])
def test_flop_formula_matches_flop_counter(overrides, depth, grad_depth):
    config = tiny_model_config(vocab_size=300, d_model=64, max_seq_len=128, **overrides)
    model = LoopedTransformer(config)
    B, T = 2, 96
    tokens = torch.randint(0, 300, (B, T))
    # The math backend decomposes attention into matmuls the counter sees (on CPU the fused
    # kernel is not counted at all).
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens, depth, grad_depth).float().pow(2).mean().backward()
    counted = counter.get_total_flops() / (B * T)
    modeled = flop_model(config, T).train(depth, grad_depth)
    assert counted == pytest.approx(modeled, rel=0.02)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(tokens, depth)
    assert counter.get_total_flops() / (B * T) == pytest.approx(
        flop_model(config, T).forward(depth), rel=0.02
    )


@pytest.mark.parametrize(
    ("k0", "switch", "paper"), [(2, 0.67, 0.453), (2, 0.8, 0.543), (4, 0.67, 0.313)]
)
def test_paper_200m_reproduces_the_papers_savings(k0, switch, paper):
    config = load_config(
        ROOT / "configs" / "paper-200m.toml",
        [f"schedule.k0={k0}", f"schedule.switch={switch}"],
    )
    assert modeled_savings(config) == pytest.approx(paper, abs=0.01)


def test_savings_of_uniform_is_zero_and_fixed_k1_is_largest():
    uniform = load_config(None, ["schedule.kind=uniform"])
    assert modeled_savings(uniform) == pytest.approx(0.0, abs=1e-12)
    fixed1 = load_config(None, ["schedule.kind=fixed", "schedule.depth=1"])
    fixed2 = load_config(None, ["schedule.kind=fixed", "schedule.depth=2"])
    assert modeled_savings(fixed1) > modeled_savings(fixed2) > 0


def test_compute_matched_planning_spends_the_same_flops():
    budget = 5e13
    plans = {}
    for kind in ("uniform", "fixed-first"):
        config = load_config(None, [f"schedule.kind={kind}", f"train.flops={budget}"])
        plan = plan_budget(config)
        fm = flop_model(config.model, config.train.seq_len)
        schedule = Schedule(config.schedule, config.train.seed)
        tps = config.train.tokens_per_step
        assert plan.flops <= budget
        one_more = schedule_flops(schedule, fm, plan.total_steps + 1, tps)
        assert one_more > budget  # the plan is the largest that fits
        plans[kind] = plan
    assert plans["fixed-first"].tokens > plans["uniform"].tokens  # cheaper steps, more of them
    assert plans["fixed-first"].flops == pytest.approx(plans["uniform"].flops, rel=0.01)


def test_impossible_budgets_are_user_errors():
    config = load_config(None, ["train.flops=1.0"])
    with pytest.raises(UserError, match=r"train\.flops"):
        plan_budget(config)
    config = load_config(None, ["train.tokens=10"])
    with pytest.raises(UserError, match=r"train\.tokens"):
        plan_budget(config)
    fm = flop_model(config.model, 16)
    with pytest.raises(UserError):
        plan_steps(Schedule(config.schedule), fm, 0.5, 16)
