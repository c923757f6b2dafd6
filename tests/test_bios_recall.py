"""Recall evaluation: the 4-of-5 rule, the bits arithmetic, and teacher-forced exact match against
real greedy generation on a small trained model."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.config import ModelConfig
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedLM, LoopedTransformer
from fixedfirst.tasks.bios.recall import (
    RecallReport,
    build_prompts,
    evaluate_recall,
    exact_match,
    recalled_bits,
    recalled_facts,
    shared_prefix_length,
)
from fixedfirst.tasks.bios.source import BiosSource, bios_seq_len
from fixedfirst.tasks.bios.templates import render
from fixedfirst.tasks.bios.world import ATTRIBUTES, BiosOptions, build_world

DATA_SEED = 1
DATA = BiosOptions(people=16, first_names=6, middle_names=6, last_names=6, cities=8)
DATA.universities = DATA.majors = DATA.employers = 8
DEPTHS = [1, 2, 4]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These models are tiny: a second intra-op thread only adds synchronisation per op, which on
    a busy shared machine costs more than the work itself (15x slower measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(one_thread):
    """A tiny looped model trained at depth 2 until about half the prompts are right."""
    torch.manual_seed(0)
    world = build_world(DATA, DATA_SEED)
    source = BiosSource(world, bios_seq_len(DATA, DATA_SEED), order_seed=0)
    config = ModelConfig(vocab_size=source.vocab_size, d_model=64, n_heads=4, n_core=1)
    model = LoopedTransformer(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(60):
        batch = source.next_batch(16)
        loss = F.cross_entropy(model(batch.inputs, 2).flatten(0, 1), batch.targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return world, source.tokenizer, model.eval()


def test_four_of_five_rule_and_bits_on_a_hand_built_table():
    correct = torch.zeros(2, 6, 5, dtype=torch.bool)
    correct[0, 0] = True  # 5 of 5
    correct[0, 1, [0, 1, 2, 4]] = True  # 4 of 5
    correct[0, 2, [1, 3, 4]] = True  # 3 of 5
    correct[0, 4, 1:] = True  # 4 of 5
    correct[0, 5, 2] = True  # 1 of 5
    correct[1] = True
    recalled = recalled_facts(correct)
    assert recalled.tolist() == [[True, True, False, False, True, False], [True] * 6]
    three_of_five = recalled_facts(correct, min_correct=3)
    assert three_of_five[0].tolist() == [True, True, True, False, True, False]
    sizes = [200, 28, 12, 300, 100, 263]
    person0 = math.log2(200) + math.log2(28) + math.log2(100)
    assert recalled_bits(recalled, sizes) == pytest.approx((person0 + 38.9477) / 2, abs=1e-4)


def test_prompts_hold_prompt_then_answer(trained):
    world, tokenizer, _ = trained
    prompts = build_prompts(world, tokenizer, people=2)
    assert prompts.inputs.shape[0] == 2 * 6 * 5
    i = (1 * 6 + ATTRIBUTES.index("university")) * 5 + 3  # person 1, university, template 3
    sentence = render("university", 3, world.names[1], world.value(1, "university"))
    start, length = int(prompts.answer_start[i]), int(prompts.lengths[i])
    assert tokenizer.decode(prompts.inputs[i, : start + 1].tolist()) == "<bos> " + sentence.prompt
    answer = prompts.answers[i][prompts.answers[i] != -100].tolist()
    assert tokenizer.decode(answer) == sentence.answer
    assert length == start + len(answer)  # the terminator is predicted, never fed
    name_tokens = len(tokenizer.encode(world.names[0]))
    assert all(len(tokenizer.encode(n)) == name_tokens for n in world.names[:2])
    assert shared_prefix_length(prompts) == 1 + name_tokens  # <bos> and the name
    with pytest.raises(UserError, match="between 1 and 16 people"):
        build_prompts(world, tokenizer, people=17)


def test_teacher_forced_exact_match_equals_greedy_generation(trained):
    world, tokenizer, model = trained
    table = exact_match(model, build_prompts(world, tokenizer), DEPTHS, batch_size=100)
    # Greedy decoding, built independently of build_prompts: group prompts of equal shape.
    groups: dict[tuple[int, int], list[tuple[int, int, int, list[int], list[int]]]] = {}
    for person in range(world.people):
        for a, attribute in enumerate(ATTRIBUTES):
            for t in range(5):
                s = render(attribute, t, world.names[person], world.value(person, attribute))
                prompt = [tokenizer.bos_id, *tokenizer.encode(s.prompt)]
                answer = tokenizer.encode(s.answer)
                groups.setdefault((len(prompt), len(answer)), []).append(
                    (person, a, t, prompt, answer)
                )
    for depth in DEPTHS:
        greedy = torch.zeros_like(table[depth])
        for (prompt_len, answer_len), items in groups.items():
            prompt = torch.tensor([item[3] for item in items])
            answer = torch.tensor([item[4] for item in items])
            generated = model.generate(prompt, answer_len, depth)[:, prompt_len:]
            for (person, a, t, _, _), ok in zip(items, (generated == answer).all(1), strict=True):
                greedy[person, a, t] = ok
        assert torch.equal(greedy, table[depth]), depth
    everything = torch.stack([table[d] for d in DEPTHS])
    assert 0.2 < everything.float().mean() < 0.8  # a real mix of right and wrong prompts
    recalled = recalled_facts(everything)
    assert recalled.any() and not recalled.all()


def test_batching_and_padding_do_not_change_the_answer(trained):
    world, tokenizer, model = trained
    prompts = build_prompts(world, tokenizer)
    whole = exact_match(model, prompts, [2], batch_size=len(prompts.lengths))[2]
    mixed = exact_match(model, prompts, [2], batch_size=37)[2]  # batches mix prompt lengths
    assert torch.equal(whole, mixed)
    unshared = exact_match(model, prompts, [2], batch_size=37, share_prefix=False)[2]
    assert torch.equal(whole, unshared)
    model.train()
    exact_match(model, prompts, [1], batch_size=500)
    assert model.training  # the caller's mode is restored
    model.eval()


class WholeForwards(LoopedLM):
    """Our model seen as another looped model would be: only `forward` and `logits_by_depth`
    (one whole forward per depth), no shared prefix, no readout at chosen positions."""

    def __init__(self, model: LoopedTransformer) -> None:
        super().__init__()
        self.inner, self.vocab_size = model, model.vocab_size

    def logits_by_depth(self, tokens, depths):
        for depth in sorted(set(depths)):
            yield depth, self.inner(tokens, depth)


def test_another_looped_model_is_scored_from_whole_forwards(trained):
    """`eval --task bios` of a transformers model: the answers gathered from every position's
    logits, the same table as our model's readout at the answer positions."""
    world, tokenizer, model = trained
    prompts = build_prompts(world, tokenizer)
    ours = exact_match(model, prompts, DEPTHS, batch_size=37)
    theirs = exact_match(WholeForwards(model), prompts, DEPTHS, batch_size=37)
    assert all(torch.equal(ours[d], theirs[d]) for d in DEPTHS)
    assert not torch.equal(ours[1], ours[4])  # the depths differ, so a wrong one would show


def test_evaluate_recall_report(trained):
    world, tokenizer, model = trained
    report = evaluate_recall(model, world, [4, 1, 2], tokenizer, batch_size=64)
    table = exact_match(model, build_prompts(world, tokenizer), DEPTHS)
    sizes = [len(world.pools.values[a]) for a in ATTRIBUTES]
    assert [r.depth for r in report.by_depth] == DEPTHS
    assert report.ceiling_bits == pytest.approx(world.bits_per_person)
    assert report.people == world.people
    for r in report.by_depth:
        recalled = recalled_facts(table[r.depth])
        assert r.bits_per_person == pytest.approx(recalled_bits(recalled, sizes))
        assert 0 < r.bits_per_person < report.ceiling_bits
        assert r.fact_recall["birth_month"] == pytest.approx(recalled[:, 2].float().mean().item())
        assert r.prompt_accuracy["major"] == pytest.approx(table[r.depth][:, 4].float().mean())
    assert RecallReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    subset = evaluate_recall(model, world, [2], tokenizer, people=5)
    five = recalled_facts(table[2][:5])
    assert subset.people == 5 and subset.bits()[2] == pytest.approx(recalled_bits(five, sizes))


def test_a_model_with_a_smaller_vocabulary_is_refused(trained):
    world, _, _ = trained
    small = LoopedTransformer(ModelConfig(vocab_size=10, d_model=32, n_heads=4))
    with pytest.raises(UserError, match="below the bios vocabulary"):
        evaluate_recall(small, world, [1])
