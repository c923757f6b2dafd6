"""A run's tokenizer as files that `transformers.AutoTokenizer` loads with no code of ours.

Each of fixedfirst's three tokenizers becomes a Hugging Face `tokenizers` file (tokenizer.json)
that gives the same ids for the same text:

- byte: a byte-level BPE with the 256 byte symbols and no merges, so id b is the byte b, and
  `<|endoftext|>` (id 256) as the special end-of-document token;
- bpe: the run's own tokenizer.json;
- words: a word-level vocabulary split on whitespace, with `<pad>`, `<bos>`, `<eos>` special.

Every document the model trained on followed a start token (`Tokenizer.start_id`), and fixedfirst
puts one before every prompt and every scored context; the post-processor does the same here
(`add_bos_token`), which is what lm-eval's stock `hf` model and `model.generate` see. Special-token
strings inside a text are encoded as ordinary text (`split_special_tokens`), as fixedfirst does:
only the data pipeline places document boundaries.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from fixedfirst.data.tokenizer import (
    EOD_TOKEN,
    BpeTokenizer,
    ByteTokenizer,
    CheckpointTokenizer,
    Tokenizer,
    WordTokenizer,
)
from fixedfirst.errors import UserError

INSTALL_HINT = "pip install 'fixedfirst[hf]' (or pip install tokenizers)"


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise UserError(
            f"--format hf writes tokenizer.json with `tokenizers`: {INSTALL_HINT}"
        ) from None
    return tokenizers


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from the 256 bytes to printable characters, the alphabet of byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _backend(tokenizer: Tokenizer):
    """The `tokenizers.Tokenizer` that encodes like `tokenizer`, without its post-processor."""
    tk = _tokenizers()
    if isinstance(tokenizer, BpeTokenizer):
        return tk.Tokenizer.from_str(tokenizer.hf.to_str())
    if isinstance(tokenizer, ByteTokenizer):
        vocab = {char: b for b, char in bytes_to_unicode().items()}
        backend = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[]))
        backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.decoder = tk.decoders.ByteLevel()
        backend.add_special_tokens([tk.AddedToken(EOD_TOKEN, special=True, normalized=False)])
        return backend
    if isinstance(tokenizer, WordTokenizer):
        vocab = {word: i for i, word in enumerate(tokenizer.vocab)}
        backend = tk.Tokenizer(tk.models.WordLevel(vocab=vocab, unk_token=None))
        backend.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
        specials = [tokenizer.PAD, tokenizer.BOS, tokenizer.EOS]
        backend.add_special_tokens(
            [tk.AddedToken(w, special=True, normalized=False) for w in specials]
        )
        return backend
    raise UserError(
        f"--format hf: no Hugging Face form of the {tokenizer.kind!r} tokenizer "
        "(byte, bpe and words have one)"
    )


def _token(tokenizer: Tokenizer, backend, token_id: int) -> str:
    token = backend.id_to_token(token_id)
    if token is None:
        raise UserError(f"--format hf: the tokenizer has no token for id {token_id}")
    return token


def hf_tokenizer_files(tokenizer: Tokenizer, max_length: int) -> dict[str, str]:
    """{file name: text} of tokenizer.json and tokenizer_config.json, checked to give the same
    ids as `tokenizer` on a sample text; a checkpoint's own tokenizer (a run that started from
    our export) as the checkpoint had it."""
    if isinstance(tokenizer, CheckpointTokenizer):
        with tempfile.TemporaryDirectory() as directory:
            tokenizer.hf.save_pretrained(directory)
            return {p.name: p.read_text(encoding="utf-8") for p in Path(directory).iterdir()}
    tk = _tokenizers()
    backend = _backend(tokenizer)
    start = _token(tokenizer, backend, tokenizer.start_id)
    stop = _token(tokenizer, backend, tokenizer.stop_id)
    pad_id = getattr(tokenizer, "pad_id", tokenizer.stop_id)
    backend.post_processor = tk.processors.TemplateProcessing(
        single=f"{start} $A",
        pair=f"{start} $A {start} $B",
        special_tokens=[(start, tokenizer.start_id)],
    )
    backend.encode_special_tokens = True
    _check_same_ids(tokenizer, backend)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": start,
        "eos_token": stop,
        "pad_token": _token(tokenizer, backend, pad_id),
        "add_bos_token": True,
        "add_eos_token": False,
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    return {
        "tokenizer.json": backend.to_str(pretty=True) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
    }


def _check_same_ids(tokenizer: Tokenizer, backend) -> None:
    """A cheap guard against a tokenizer that would silently encode differently."""
    if isinstance(tokenizer, WordTokenizer):
        sample = " ".join(tokenizer.vocab[3:40])
    else:
        sample = "Q: Why did the chicken cross? \u00e9t\u00e9, \u65e5\u672c <|endoftext|>\n\t"
    ours = [tokenizer.start_id, *tokenizer.encode(sample)]
    theirs = backend.encode(sample).ids
    if ours != theirs:
        raise UserError(
            f"--format hf: the Hugging Face form of the {tokenizer.kind} tokenizer encodes a "
            "sample text differently from the run's tokenizer; nothing was written"
        )
