"""What a looped mixture-of-experts' router does at each pass: each expert's share of the tokens.

Inkling2Loop runs its loop layers once per pass, each with the same top-k router module, so the
p-th call of a loop layer's router within one forward is pass p (the model computes pass p from
the passes before it only: one forward at the deepest depth gives every shallower pass too). A
forward hook on each loop layer's router counts the experts it picks; an expert's share at a pass
is the fraction of the (token, slot) picks that went to it, so the shares of a pass sum to 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fixedfirst.data.registry import kind_options
from fixedfirst.errors import UserError
from fixedfirst.model.transformers_loop import TransformersLoop
from fixedfirst.runs.checkpoint import SWITCH_TAG, CheckpointManager
from fixedfirst.runs.directory import RunDir
from fixedfirst.runs.opening import find_checkpoint, load_any_run
from fixedfirst.studies.kit.depth_scoring import cached, measured_key
from fixedfirst.tasks.chains.source import evaluation_seed, evaluation_set


def loop_routers(model: TransformersLoop) -> list[tuple[int, Any]]:
    """(layer index, router) of every loop layer with a routed mixture of experts."""
    network: Any = model.network
    text = network.model
    config = text.config
    found = []
    for index in range(config.loop_layer_index_start, config.loop_layer_index_end):
        gate = getattr(getattr(text.layers[index], "mlp", None), "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            found.append((index, gate))
    if not found:
        raise UserError(
            f"{model.architecture} has no routed experts in its loop layers "
            f"{config.loop_layer_index_start}..{config.loop_layer_index_end - 1}: nothing to "
            "measure the router of"
        )
    return found


@torch.no_grad()
def expert_shares(
    model: TransformersLoop, tokens: torch.Tensor, depth: int, batch_size: int = 256
) -> dict[str, list[list[float]]]:
    """Loop layer index (as a string) -> [pass][expert] share of the picks, over every token of
    `tokens` (B, T), from forwards at `depth`."""
    routers = loop_routers(model)
    experts = {index: int(router.num_experts) for index, router in routers}
    counts = {index: torch.zeros(depth, experts[index], dtype=torch.float64) for index in experts}
    calls = dict.fromkeys(counts, 0)

    def counter(index: int) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> None:
            picks = torch.bincount(output[2].reshape(-1), minlength=experts[index])
            counts[index][calls[index]] += picks[: experts[index]].double()
            calls[index] += 1

        return hook

    hooks = [router.register_forward_hook(counter(index)) for index, router in routers]
    was_training = model.training
    model.eval()
    try:
        for start in range(0, tokens.shape[0], batch_size):
            for index in calls:
                calls[index] = 0
            model(tokens[start : start + batch_size], depth)
            wrong = {i: n for i, n in calls.items() if n != depth}
            if wrong:
                raise RuntimeError(f"router calls per loop layer {wrong}, expected {depth} each")
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return {
        str(index): (count / count.sum(dim=1, keepdim=True)).tolist()
        for index, count in counts.items()
    }


ROUTER_FORMAT = "fixedfirst-router-shares"
ROUTER_VERSION = 1


def router_by_pass(run: Path, depth: int, sequences: int) -> dict[str, Any]:
    """Each loop layer's expert shares at passes 1..`depth` on the run's chains evaluation
    sequences, at its newest checkpoint (`final`) and, for a fixed-first run, at its switch
    checkpoint (`switch`, None for other runs): what the finishing stage changed. Cached beside
    the run (RUN/router-step-N.json)."""
    config, newest = find_checkpoint(run)
    switch = CheckpointManager(RunDir(run).checkpoints_path).with_tag(SWITCH_TAG)
    seed = evaluation_seed(config.data.seed, config.train.seed)
    switch_step = None if switch is None else switch.step
    key = measured_key(
        ROUTER_VERSION, newest, seed, switch_step=switch_step, depth=depth, sequences=sequences
    )

    def at(step: int) -> dict[str, Any]:
        loaded = load_any_run(run, step)
        if not isinstance(loaded.model, TransformersLoop):
            raise UserError(f"{run}: router shares are measured on a transformers model only")
        tokens = evaluation_set(kind_options(config), seed, sequences).batch.inputs
        return {"step": step, "shares": expert_shares(loaded.model, tokens, depth)}

    def compute() -> dict[str, Any]:
        return {
            "final": at(newest.step),
            "switch": None if switch is None or switch.step == newest.step else at(switch.step),
        }

    return cached(run / f"router-step-{newest.step:07d}.json", ROUTER_FORMAT, key, compute)
