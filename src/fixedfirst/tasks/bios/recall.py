"""Recall evaluation: how many bits of the world a model reproduces, at every serving depth.

For every person, attribute and template (people x 6 x 5 prompts) the prompt is `<bos>` plus the
sentence up to the answer, and the answer is the value's tokens plus the terminator ".". The
answer counts as correct when greedy decoding would reproduce it exactly; because it ends in a
terminator, that is the same as every answer token being the argmax under teacher forcing, so one
batched forward scores a prompt, and `LoopedTransformer.logits_by_depth` scores it at all serving
depths in one pass of the recurrence. A fact is recalled when at least 4 of its 5 templates are
correct (Allen-Zhu & Li 2023). Recalled bits per person is the mean over people of
sum(log2(pool size)) over that person's recalled attributes; its ceiling is the world's
bits per person (38.95 with the default pools).

Prompts are right-padded: the model is causal with rotary positions counted from 0, so padding
after the answer changes nothing before it, and each answer is scored at its true positions.
Prompts are sorted by length before batching so that batches carry almost no padding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fixedfirst.errors import UserError
from fixedfirst.model import LoopedLM, LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.model.shared_prefix import PrefixRows, SharedPrefix
from fixedfirst.tasks.bios.templates import TEMPLATES_PER_ATTRIBUTE, render
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import ATTRIBUTES, World

MIN_CORRECT_TEMPLATES = 4
PROMPTS_PER_PERSON = len(ATTRIBUTES) * TEMPLATES_PER_ATTRIBUTE
"""A person's prompts are consecutive rows of `RecallPrompts`: attribute-major, then template."""


@dataclass
class RecallPrompts:
    """Every prompt of `people` people, tokenized; prompt i is (person, attribute, template) =
    divmod-unravelled from i in (people, 6, 5) order."""

    inputs: torch.Tensor
    """(P, T) prompt plus answer without its last token, right-padded."""
    answers: torch.Tensor
    """(P, A) answer tokens (value + terminator), right-padded with -100."""
    answer_start: torch.Tensor
    """(P,) the position whose logits predict the first answer token (prompt length - 1)."""
    lengths: torch.Tensor
    """(P,) unpadded length of each row of `inputs`."""
    people: int


def build_prompts(
    world: World, tokenizer: BiosTokenizer, people: int | None = None
) -> RecallPrompts:
    """The recall prompts of the first `people` people of `world` (all of them by default)."""
    n = world.people if people is None else people
    if not 1 <= n <= world.people:
        raise UserError(f"recall needs between 1 and {world.people} people, got {n}")
    rows: list[list[int]] = []
    answers: list[list[int]] = []
    for person in range(n):
        for attribute in ATTRIBUTES:
            value = world.value(person, attribute)
            for template in range(TEMPLATES_PER_ATTRIBUTE):
                sentence = render(attribute, template, world.names[person], value)
                prompt = [tokenizer.bos_id, *tokenizer.encode(sentence.prompt)]
                answer = tokenizer.encode(sentence.answer)
                rows.append(prompt + answer[:-1])
                answers.append(answer)
    lengths = torch.tensor([len(r) for r in rows])
    answer_lengths = torch.tensor([len(a) for a in answers])
    inputs = torch.full((len(rows), int(lengths.max())), tokenizer.pad_id)
    answer_table = torch.full((len(rows), int(answer_lengths.max())), IGNORE_INDEX)
    for i, (row, answer) in enumerate(zip(rows, answers, strict=True)):
        inputs[i, : len(row)] = torch.tensor(row)
        answer_table[i, : len(answer)] = torch.tensor(answer)
    return RecallPrompts(inputs, answer_table, lengths - answer_lengths, lengths, n)


def shared_prefix_length(prompts: RecallPrompts) -> int:
    """The longest L such that every person's prompts begin with the same L tokens (`<bos>` and
    the name) and every answer is predicted at or after position L."""
    rows = prompts.inputs.reshape(prompts.people, PROMPTS_PER_PERSON, -1)
    same = (rows == rows[:, :1]).all(dim=1).all(dim=0)  # (T,) column equal within every person
    common = int(same.long().cumprod(0).sum())
    return min(common, int(prompts.answer_start.min()))


@torch.no_grad()
def exact_match(
    model: LoopedLM,
    prompts: RecallPrompts,
    depths: Iterable[int],
    batch_size: int = 512,
    share_prefix: bool = True,
) -> dict[int, torch.Tensor]:
    """depth -> (people, 6, 5) bool: is every answer token the argmax, given the tokens before it?

    share_prefix: run each person's common prefix (`<bos>` and the name) once and score the 30
    continuations after it (model/shared_prefix.py), about half the work of whole prompts; the
    same answers up to float rounding. Our model only: another looped model scores whole
    prompts, one forward per depth. Runs in eval mode (the fixed evaluation initial state) and
    restores the model's mode after."""
    depths = sorted(set(depths))
    if batch_size < 1:
        raise UserError(f"batch size must be >= 1, got {batch_size}")
    ours = isinstance(model, LoopedTransformer)
    skip = shared_prefix_length(prompts) if share_prefix and ours else 0
    # People per prefill: their prompts fill a few batches, so sorting them by length still
    # leaves little padding, and the prefix's keys (every layer application) stay small.
    block = max(1, PREFILL_BATCHES * batch_size // PROMPTS_PER_PERSON) if skip else prompts.people
    correct = {d: torch.zeros(len(prompts.lengths), dtype=torch.bool) for d in depths}
    was_training = model.training
    model.eval()
    try:
        for first in range(0, prompts.people, block):
            people = range(first, min(first + block, prompts.people))
            rows = torch.arange(people.start * PROMPTS_PER_PERSON, people.stop * PROMPTS_PER_PERSON)
            shared = None
            if skip:
                assert isinstance(model, LoopedTransformer)
                prefixes = prompts.inputs[rows[::PROMPTS_PER_PERSON], :skip]
                shared = model.prefill_shared(prefixes.to(_device(model)), depths)
            for chunk, table in _score_rows(model, prompts, rows, depths, batch_size, skip, shared):
                for depth, ok in table.items():
                    correct[depth][chunk] = ok
    finally:
        model.train(was_training)
    shape = (prompts.people, len(ATTRIBUTES), TEMPLATES_PER_ATTRIBUTE)
    return {d: c.view(shape) for d, c in correct.items()}


PREFILL_BATCHES = 4
"""Batches of continuations per shared-prefix prefill (see `exact_match`)."""


def _device(model: LoopedLM) -> torch.device:
    return next(model.parameters()).device


def _score_rows(
    model: LoopedLM,
    prompts: RecallPrompts,
    rows: torch.Tensor,
    depths: list[int],
    batch_size: int,
    skip: int,
    shared: SharedPrefix | None,
) -> Iterator[tuple[torch.Tensor, dict[int, torch.Tensor]]]:
    """(prompt indices, depth -> answered exactly) for batches of `rows`, sorted by length so
    that a batch carries almost no padding; with `shared`, each prompt from column `skip` on."""
    device = _device(model)
    offsets = torch.arange(prompts.answers.shape[1])
    order = rows[torch.argsort(prompts.lengths[rows], stable=True)]
    for chunk in order.split(batch_size):
        width = int(prompts.lengths[chunk].max())
        tokens = prompts.inputs[chunk, skip:width].to(device)
        answers = prompts.answers[chunk].to(device)
        scored = answers != IGNORE_INDEX
        positions = (prompts.answer_start[chunk, None] - skip + offsets).clamp(max=width - skip - 1)
        after = None
        if shared is not None:
            groups = (chunk - rows[0]) // PROMPTS_PER_PERSON
            after = shared.rows(groups.to(device))
        # Logits at the answer positions only: the head (2767 columns for the default world)
        # at ~3 of each prompt's positions, at every one of the serving depths (our model).
        table = {}
        for depth, logits in _answer_logits(model, tokens, depths, positions.to(device), after):
            predicted = logits.argmax(dim=-1)
            table[depth] = ((predicted == answers) | ~scored).all(dim=1).cpu()
        yield chunk, table


def _answer_logits(
    model: LoopedLM,
    tokens: torch.Tensor,
    depths: list[int],
    positions: torch.Tensor,
    after: PrefixRows | None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(depth, logits (B, P, V) at `positions`): read out there only by our model, gathered
    from every position's logits of another's (`LoopedLM.logits_by_depth`)."""
    if isinstance(model, LoopedTransformer):
        yield from model.logits_by_depth(tokens, depths, positions, after)
        return
    for depth, logits in model.logits_by_depth(tokens, depths):
        yield depth, logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))


def recalled_facts(correct: torch.Tensor, min_correct: int = MIN_CORRECT_TEMPLATES) -> torch.Tensor:
    """(..., templates) bool -> (...) bool: a fact is recalled when >= min_correct templates are."""
    return correct.sum(dim=-1) >= min_correct


def recalled_bits(recalled: torch.Tensor, pool_sizes: Iterable[int]) -> float:
    """Mean over people of sum(log2(pool size)) over their recalled attributes.

    recalled: (people, 6) bool; pool_sizes: the six pool sizes in ATTRIBUTES order."""
    bits = torch.tensor([math.log2(n) for n in pool_sizes], dtype=torch.float64)
    return float((recalled.double() @ bits).mean())


@dataclass
class DepthRecall:
    """Recall at one serving depth."""

    depth: int
    bits_per_person: float
    fact_recall: dict[str, float]
    """Attribute -> fraction of people whose fact is recalled (>= 4 of 5 templates)."""
    prompt_accuracy: dict[str, float]
    """Attribute -> fraction of its prompts answered exactly."""


@dataclass
class RecallReport:
    """Recall of a model at several serving depths; `to_dict` is JSON-ready."""

    people: int
    ceiling_bits: float
    by_depth: list[DepthRecall]

    def bits(self) -> dict[int, float]:
        return {r.depth: r.bits_per_person for r in self.by_depth}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecallReport:
        return cls(
            people=data["people"],
            ceiling_bits=data["ceiling_bits"],
            by_depth=[DepthRecall(**r) for r in data["by_depth"]],
        )


def evaluate_recall(
    model: LoopedLM,
    world: World,
    depths: Iterable[int],
    tokenizer: BiosTokenizer | None = None,
    people: int | None = None,
    batch_size: int = 512,
) -> RecallReport:
    """Recalled bits per person at each depth, over the first `people` people (default: all).

    People are drawn independently, so the first n are an unbiased sample when the full
    evaluation is too slow; the cost is people x 30 prompts x ~10 tokens x max(depths)."""
    tokenizer = tokenizer or BiosTokenizer.for_pools(world.pools)
    if model.vocab_size < tokenizer.vocab_size:
        raise UserError(
            f"the model's vocab_size {model.vocab_size} is below the bios vocabulary "
            f"({tokenizer.vocab_size} tokens): it was not trained on this world"
        )
    prompts = build_prompts(world, tokenizer, people)
    correct = exact_match(model, prompts, depths, batch_size)
    sizes = [len(world.pools.values[a]) for a in ATTRIBUTES]
    results = []
    for depth, table in correct.items():
        recalled = recalled_facts(table)
        results.append(
            DepthRecall(
                depth=depth,
                bits_per_person=recalled_bits(recalled, sizes),
                fact_recall={
                    a: float(recalled[:, i].double().mean()) for i, a in enumerate(ATTRIBUTES)
                },
                prompt_accuracy={
                    a: float(table[:, i].double().mean()) for i, a in enumerate(ATTRIBUTES)
                },
            )
        )
    return RecallReport(people=prompts.people, ceiling_bits=world.bits_per_person, by_depth=results)
