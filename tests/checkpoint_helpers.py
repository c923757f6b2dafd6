"""A tiny looped checkpoint as someone else would publish it: transformers' own save_pretrained of
a tiny Inkling2LoopForCausalLM (tests/inkling_helpers.py) trained at one fixed depth, sharded,
with a small BPE tokenizer saved beside it as a PreTrainedTokenizerFast; and text to prepare
with that tokenizer. Nothing here imports fixedfirst."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from tests.inkling_helpers import TINY, VOCAB

NATIVE_DEPTH = 3
"""The number of loop passes the tiny checkpoint was 'trained' at (its loop_num_passes)."""
WORDS = ["river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor", "the", "of"]
EOS = "<|endoftext|>"


def corpus(documents: int = 200, seed: int = 0) -> str:
    """Documents of the words above separated by '%' lines (fixedfirst prepare --separator %):
    each counts through the list from a random word, so that a model has something to learn."""
    rng = random.Random(seed)
    docs = []
    for _ in range(documents):
        start = rng.randrange(len(WORDS))
        length = rng.randrange(12, 40)
        docs.append(" ".join(WORDS[(start + i) % len(WORDS)] for i in range(length)))
    return "\n%\n".join(docs) + "\n"


def save_tokenizer(directory: Path, text: str) -> None:
    """A BPE tokenizer of exactly VOCAB ids learnt from `text`, saved by transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOS, "<unk>"], show_progress=False
    )
    backend.train_from_iterator([text], trainer)
    assert backend.get_vocab_size() == VOCAB, backend.get_vocab_size()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, unk_token="<unk>")
    fast.save_pretrained(directory)


def save_checkpoint(
    directory: Path, seed: int = 0, depth: int = NATIVE_DEPTH, shard: str = "30KB"
) -> Path:
    """The tiny Inkling2Loop model (weights from `seed`, `depth` loop passes) written by
    save_pretrained in shards of at most `shard`, with its tokenizer; returns `directory`."""
    from transformers import Inkling2LoopForCausalLM
    from transformers.models.inkling2_loop import Inkling2LoopTextConfig

    torch.manual_seed(seed)
    options = dict(TINY, loop_num_passes=depth, eos_token_id=0)
    model = Inkling2LoopForCausalLM(Inkling2LoopTextConfig(**options))
    # As training leaves them: the queries that start at zero, and the message gates that carry
    # one pass into the next, drawn at random, so that every depth computes other logits.
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "message_gate" in name or not parameter.any():
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(directory, max_shard_size=shard)
    save_tokenizer(directory, corpus())
    return directory


def shards(directory: Path) -> list[Path]:
    return sorted(directory.glob("model-*-of-*.safetensors"))


def transformers_tokens(
    directory: Path, prompt: list[int], passes: int, stop: int, new: int
) -> list[int]:
    """Greedy tokens of transformers' own model and generate, loaded from the checkpoint
    directory with its loop passes set to `passes`, up to `new` of them before `stop`: an
    independent reference (nothing of fixedfirst)."""
    from transformers import AutoConfig, GenerationConfig, Inkling2LoopForCausalLM

    config = AutoConfig.from_pretrained(directory, loop_num_passes=passes)
    network = Inkling2LoopForCausalLM.from_pretrained(directory, config=config).eval()
    generation = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=stop)
    with torch.no_grad():
        out = network.generate(input_ids=torch.tensor([prompt]), generation_config=generation)
    tokens = out[0, len(prompt) :].tolist()
    return tokens[: tokens.index(stop)] if stop in tokens else tokens
