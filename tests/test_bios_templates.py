"""Templates and tokenizer: every template renders and its answer is recoverable from the tokens."""

from __future__ import annotations

import pytest

from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.source import bios_vocab_size
from fixedfirst.tasks.bios.templates import TEMPLATES, render
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import ATTRIBUTES, BiosOptions, build_world

DATA = BiosOptions(people=30, first_names=10, middle_names=10, last_names=10, cities=20)


def test_five_templates_per_attribute_with_the_answer_last():
    assert list(TEMPLATES) == list(ATTRIBUTES)
    for attribute, templates in TEMPLATES.items():
        assert len(templates) == len(set(templates)) == 5
        for text in templates:
            assert text.count("{name}") == 1 and text.count("{value}") == 1
            assert text.endswith("{value} .")
        assert len({len(t.split()) for t in templates}) == 1, attribute


def test_prompts_name_their_attribute():
    prompts = {}
    for attribute in ATTRIBUTES:
        for t in range(5):
            prompt = render(attribute, t, "Ann Bo Cy", "X").prompt
            assert prompt not in prompts, (attribute, prompts.get(prompt))
            prompts[prompt] = attribute


def test_every_template_renders_and_its_answer_is_recoverable():
    world = build_world(DATA)
    tokenizer = BiosTokenizer.for_pools(world.pools)
    for person in range(world.people):
        for attribute in ATTRIBUTES:
            value = world.value(person, attribute)
            for t in range(5):
                sentence = render(attribute, t, world.names[person], value)
                assert world.names[person] in sentence.prompt
                assert sentence.text == f"{sentence.prompt} {value} ."
                ids = tokenizer.encode(sentence.text)
                assert tokenizer.decode(ids) == sentence.text
                prompt_ids = tokenizer.encode(sentence.prompt)
                assert ids[: len(prompt_ids)] == prompt_ids
                answer = ids[len(prompt_ids) :]
                assert tokenizer.decode(answer) == f"{value} ."
                assert len(answer) == len(value.split()) + 1


def test_tokenizer_vocabulary():
    world = build_world(DATA)
    tokenizer = BiosTokenizer.for_pools(world.pools)
    assert tokenizer.vocab[:3] == ["<pad>", "<bos>", "<eos>"]
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    assert len(set(tokenizer.vocab)) == tokenizer.vocab_size
    words = {w for v in world.pools.values["university"] for w in v.split()}
    assert words <= set(tokenizer.vocab)
    assert bios_vocab_size(DATA) == tokenizer.vocab_size
    assert bios_vocab_size(BiosOptions()) > 400 + 400 + 1000 + 200 + 300 + 100 + 263
    with pytest.raises(UserError, match="'Zzyzx' is not in the vocabulary"):
        tokenizer.encode("Zzyzx was born in")
