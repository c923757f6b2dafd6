"""The tokenizer a served model reads and writes text with, whatever kind of run it came from.

A run on prepared token data decodes with the byte or BPE tokenizer saved beside its shards
(`load_tokenizer(data.path)`); a bios run with the word-level tokenizer of its world, rebuilt from
the run's data configuration; a run on the synthetic toy language has no text at all. Serving
also needs two ids the training data placed: the one that starts a document (every prompt and
every scored context begins with it, as every training document followed one) and the one that
ends it (generation stops there). For byte and BPE data both are the end-of-document id, which
separates documents in the token stream; a bios biography starts with `<bos>` and ends at `<eos>`.

Exports (`fixedfirst export`) save the tokenizer beside the weights: byte/BPE in the files
`fixedfirst prepare` writes, bios as its word list, so an export needs neither the data nor the
bios generator to decode.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError

BIOS_KIND = "bios"


class ServingTokenizer:
    """Text <-> ids for a served model, with the ids that start and end a document."""

    def __init__(self, kind: str, tokenizer: Any, start_id: int, stop_id: int) -> None:
        self.kind = kind
        self.tokenizer = tokenizer
        self.start_id = start_id
        self.stop_id = stop_id

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "start_id": self.start_id,
            "stop_id": self.stop_id,
        }

    def save(self, directory: Path) -> None:
        """Write the tokenizer's files into `directory`, readable by `load_saved_tokenizer`."""
        from fixedfirst.data.tokenizer import DESCRIPTION_FILE

        if self.kind != BIOS_KIND:
            self.tokenizer.save(directory)
            return
        directory.mkdir(parents=True, exist_ok=True)
        description = {**self.describe(), "words": self.tokenizer.vocab}
        (directory / DESCRIPTION_FILE).write_text(json.dumps(description) + "\n")


def _from_data_tokenizer(tokenizer: Any) -> ServingTokenizer:
    return ServingTokenizer(tokenizer.kind, tokenizer, tokenizer.eod_id, tokenizer.eod_id)


def _from_bios_tokenizer(tokenizer: Any) -> ServingTokenizer:
    return ServingTokenizer(BIOS_KIND, tokenizer, tokenizer.bos_id, tokenizer.eos_id)


def run_tokenizer(config: RunConfig, data_state: dict[str, Any] | None = None) -> ServingTokenizer:
    """The tokenizer of a run, from its data configuration (and the checkpoint's data state,
    which names the data the weights were trained on)."""
    data = config.data
    if data.kind == "synthetic":
        raise UserError(
            "this run trained on [data] kind = 'synthetic', a toy language without text or "
            "tokenizer; generation and downstream evaluation need a run on 'tokens' or 'bios' data"
        )
    if data.kind == "bios":
        from fixedfirst.tasks.bios import BiosTokenizer, build_pools

        return _from_bios_tokenizer(BiosTokenizer.for_pools(build_pools(data)))
    from fixedfirst.data.prepared import read_meta
    from fixedfirst.data.tokenizer import load_tokenizer

    assert data.path is not None
    meta = read_meta(data.path)
    trained_on = (data_state or {}).get("fingerprint")
    if trained_on is not None and trained_on != meta["fingerprint"]:
        raise UserError(
            f"the checkpoint was trained on other data than {data.path} (the data fingerprints "
            "differ), so its tokenizer may not be the one there; point data.path at the data it "
            "was trained on"
        )
    tokenizer = _from_data_tokenizer(load_tokenizer(data.path))
    if tokenizer.vocab_size > config.model.vocab_size:
        raise UserError(
            f"the tokenizer at {data.path} has {tokenizer.vocab_size} ids, the model only "
            f"{config.model.vocab_size}"
        )
    return tokenizer


def load_saved_tokenizer(directory: Path) -> ServingTokenizer:
    """A tokenizer written by `ServingTokenizer.save`."""
    from fixedfirst.data.tokenizer import DESCRIPTION_FILE, load_tokenizer

    description_file = directory / DESCRIPTION_FILE
    try:
        description = json.loads(description_file.read_text())
        kind = description["kind"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{description_file} is missing or unreadable") from None
    if kind != BIOS_KIND:
        return _from_data_tokenizer(load_tokenizer(directory))
    from fixedfirst.tasks.bios import BiosTokenizer

    words = description.get("words")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise UserError(f"{description_file}: a bios tokenizer needs its list of words")
    return _from_bios_tokenizer(BiosTokenizer(words))
