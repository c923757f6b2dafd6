"""A bios sequence for `fixedfirst inspect`: one person's biography with its answers marked.

Example N is person N's biography in a fixed form: `<bos>`, then the first template of every
attribute in the order of ATTRIBUTES (training biographies draw both at random). Every position
is scored against the next token, as in training; the positions that predict a value's tokens or
its terminator are the answers recall counts (recall prompts hold one sentence each; here the
other sentences are context too).
"""

from __future__ import annotations

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import ScoredSequence, kind_options
from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.templates import render
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import ATTRIBUTES, build_world


def biography_example(config: RunConfig, index: int) -> ScoredSequence:
    world = build_world(kind_options(config), config.data.seed)
    if not 0 <= index < world.people:
        raise UserError(
            f"bios example {index} does not exist: the world has {world.people} people, "
            f"examples 0..{world.people - 1}"
        )
    tokenizer = BiosTokenizer.for_pools(world.pools)
    name = world.names[index]
    tokens = [tokenizer.bos_id]
    answers: dict[int, str] = {}
    for attribute in ATTRIBUTES:
        value = world.value(index, attribute)
        sentence = render(attribute, 0, name, value)
        tokens += tokenizer.encode(sentence.prompt)
        answer = tokenizer.encode(sentence.answer)
        for offset in range(len(answer)):  # the position before a token predicts it
            answers[len(tokens) - 1 + offset] = f"{attribute.replace('_', ' ')}: {value}"
        tokens += answer
    return ScoredSequence(
        inputs=tokens,
        targets=[*tokens[1:], tokenizer.eos_id],
        title=f"bios person {index} ({name}), first template of every attribute",
        answers=answers,
    )
