"""Tokenizers: byte-level (needs nothing), byte-level BPE trained locally, a word-level one for
synthetic tasks whose text is made of a known set of words, and a checkpoint's own (a Hugging
Face tokenizer saved beside weights someone else trained).

All share one interface (`encode`, `decode`, `vocab_size`, `eod_id`, `start_id`, `stop_id`,
`save`). Byte and BPE tokenizers are saved beside the token shards they produced, so a run, its
evaluation and later generation all decode with the exact tokenizer the data was made with
(`load_tokenizer(DATA)`); a task's word tokenizer is rebuilt from the task's configuration, and an
export saves whichever the run used.

Every document ends with an end-of-document token (`EOD_TOKEN`). Text that happens to contain the
string "<|endoftext|>" is encoded as ordinary characters, never as the special id: only the data
pipeline places end-of-document tokens, so a document cannot forge a boundary.

BPE is byte-level (the GPT-2 scheme: text -> UTF-8 bytes -> merged byte pairs), so any string,
whatever its script, encodes without an unknown token and decodes back exactly.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from fixedfirst.errors import UserError

EOD_TOKEN = "<|endoftext|>"
DESCRIPTION_FILE = "fixedfirst-tokenizer.json"
"""Our small description (kind, vocab size, end-of-document id) inside a tokenizer directory."""
BPE_FILE = "tokenizer.json"
"""The Hugging Face `tokenizers` file of a BPE tokenizer (loadable by that library directly)."""
TOKENIZER_DIR = "tokenizer"
"""Where `fixedfirst prepare` saves the tokenizer inside a DATA directory."""


class Tokenizer(ABC):
    """Text <-> token ids in [0, vocab_size), with an end-of-document id."""

    kind: ClassVar[str]
    vocab_size: int
    eod_id: int

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """The ids of `text` (no end-of-document token is added)."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; the end-of-document id reads as EOD_TOKEN."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of several texts (a subclass may encode them in parallel)."""
        return [self.encode(text) for text in texts]

    def encode_documents(
        self, texts: Sequence[str], ends: Sequence[bool] | None = None
    ) -> np.ndarray:
        """All texts' ids as one int64 array, the end-of-document id after each text that ends
        a document (`ends[i]`; by default every text is a whole document). A document given
        in pieces cut where the tokenizer cuts anyway (data/pieces.py) encodes as if whole."""
        ids: list[int] = []
        for encoded, end in zip(self.encode_batch(texts), ends or [True] * len(texts), strict=True):
            ids.extend(encoded)
            if end:
                ids.append(self.eod_id)
        return np.array(ids, dtype=np.int64)

    @property
    def start_id(self) -> int:
        """The id every document starts after: every prompt and scored context begins with it,
        as every training document followed one. For byte and BPE data the end-of-document id,
        which separates documents in the token stream."""
        return self.eod_id

    @property
    def stop_id(self) -> int:
        """The id that ends a document: generation stops there."""
        return self.eod_id

    def description(self) -> dict:
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "eod_id": self.eod_id,
            "eod_token": EOD_TOKEN,
            "start_id": self.start_id,
            "stop_id": self.stop_id,
        }

    def save(self, directory: Path) -> None:
        """Write the tokenizer into `directory` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / DESCRIPTION_FILE).write_text(json.dumps(self.description(), indent=2) + "\n")


class ByteTokenizer(Tokenizer):
    """Ids 0..255 are the UTF-8 bytes of the text; 256 ends a document. Vocabulary: 257."""

    kind = "byte"

    def __init__(self) -> None:
        self.vocab_size = 257
        self.eod_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_documents(
        self, texts: Sequence[str], ends: Sequence[bool] | None = None
    ) -> np.ndarray:
        if not texts:
            return np.empty(0, dtype=np.int64)
        ends = ends or [True] * len(texts)
        # One byte after each document's end (any value): its slot becomes the end-of-document id.
        encoded = [
            t.encode("utf-8") + (b"\0" if end else b"") for t, end in zip(texts, ends, strict=True)
        ]
        ids = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64)
        slots = np.cumsum([len(b) for b in encoded]) - 1
        ids[slots[np.asarray(ends, dtype=bool)]] = self.eod_id
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        pieces: list[str] = []
        run = bytearray()
        for i in ids:
            if 0 <= i < 256:
                run.append(i)
                continue
            pieces.append(run.decode("utf-8", errors="replace"))
            run.clear()
            # An id the data never contains (a model's vocabulary may be padded) reads as U+FFFD.
            pieces.append(EOD_TOKEN if i == self.eod_id else "\ufffd")
        pieces.append(run.decode("utf-8", errors="replace"))
        return "".join(pieces)


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise UserError(
            "the BPE tokenizer needs the `tokenizers` package: "
            "pip install 'fixedfirst[data]' (or pip install tokenizers)"
        ) from None
    return tokenizers


class BpeTokenizer(Tokenizer):
    """Byte-level BPE from Hugging Face `tokenizers`; id 0 is the end-of-document token."""

    kind = "bpe"
    MIN_VOCAB = 257
    """256 byte symbols + the end-of-document token: BPE with no merges at all."""

    def __init__(self, hf_tokenizer) -> None:
        self.hf = hf_tokenizer
        # Not stored in the saved file: split "<|endoftext|>" inside a text like any other string.
        self.hf.encode_special_tokens = True
        self.vocab_size = self.hf.get_vocab_size()
        self.eod_id = self.hf.token_to_id(EOD_TOKEN)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BpeTokenizer:
        """Learn merges from `texts` until the vocabulary holds `vocab_size` ids (fewer when the
        text runs out of pairs to merge)."""
        if vocab_size < cls.MIN_VOCAB:
            raise UserError(
                f"--vocab-size {vocab_size}: byte-level BPE needs at least {cls.MIN_VOCAB} ids "
                "(256 bytes + end-of-document)"
            )
        tk = _import_tokenizers()
        hf = tk.Tokenizer(tk.models.BPE())
        hf.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOD_TOKEN],
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        hf.train_from_iterator(texts, trainer=trainer)
        return cls(hf)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self.hf.encode_batch(list(texts))]  # parallel in Rust

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def save(self, directory: Path) -> None:
        super().save(directory)
        self.hf.save(str(Path(directory) / BPE_FILE))

    @classmethod
    def load(cls, directory: Path) -> BpeTokenizer:
        tk = _import_tokenizers()
        return cls(tk.Tokenizer.from_file(str(Path(directory) / BPE_FILE)))


class WordTokenizer(Tokenizer):
    """One id per whitespace-separated word of a fixed vocabulary.

    For synthetic tasks whose generator writes from a known, small set of words: a task builds the
    vocabulary from everything it can produce. Sub-word tokenizers would spell a fictional name
    in several pieces; one token per word keeps examples short, which is what makes such tasks
    train in minutes on a CPU. The first three ids are `<pad>`, `<bos>` (starts every document)
    and `<eos>` (ends it).
    """

    kind = "words"
    PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"

    def __init__(self, words: Iterable[str]) -> None:
        self.vocab: list[str] = list(dict.fromkeys([self.PAD, self.BOS, self.EOS, *words]))
        self.ids: dict[str, int] = {word: i for i, word in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2  # the specials come first
        self.vocab_size = len(self.vocab)
        self.eod_id = self.eos_id

    @property
    def start_id(self) -> int:
        return self.bos_id

    def encode(self, text: str) -> list[int]:
        try:
            return [self.ids[word] for word in text.split()]
        except KeyError as e:
            raise UserError(f"the word {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Iterable[int]) -> str:
        # An id beyond the vocabulary (a model's may be padded) reads as U+FFFD.
        return " ".join(self.vocab[i] if 0 <= i < self.vocab_size else "\ufffd" for i in ids)

    def description(self) -> dict:
        return {**super().description(), "words": self.vocab}


class CheckpointTokenizer(Tokenizer):
    """A checkpoint's own tokenizer, for the text a run from that checkpoint trains on
    (`fixedfirst prepare --tokenizer CHECKPOINT_DIR`): transformers' AutoTokenizer on the
    checkpoint's files (never remote code), its end-of-sequence token as the end of every
    document, its beginning-of-sequence token (when it has one) as the start. No special token
    is added inside a document, and special-token strings in the text are encoded as text.
    `fingerprint` names it, so that data and a checkpoint are matched by what their tokenizers
    are, not by where they were read from."""

    kind = "checkpoint"
    FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    """What a saved Hugging Face tokenizer holds at least one of."""

    def __init__(self, hf_tokenizer, where: str) -> None:
        self.hf = hf_tokenizer
        self.backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        self.vocab_size = len(hf_tokenizer)
        eos = hf_tokenizer.eos_token_id
        if eos is None:
            raise UserError(
                f"{where}: its tokenizer names no end-of-sequence token (eos_token), which "
                "fixedfirst places after every document; set eos_token in its "
                "tokenizer_config.json"
            )
        self.eod_id = int(eos)
        bos = hf_tokenizer.bos_token_id
        self.bos_id = None if bos is None else int(bos)
        if self.backend is not None:
            self.fingerprint = hashlib.sha256(self.backend.to_str().encode()).hexdigest()
            self.backend.encode_special_tokens = True
        else:  # a tokenizer without a `tokenizers` backend: named by its vocabulary
            vocab = sorted(hf_tokenizer.get_vocab().items())
            self.fingerprint = hashlib.sha256(json.dumps(vocab).encode()).hexdigest()

    @classmethod
    def load(cls, directory: str | Path) -> CheckpointTokenizer:
        """The tokenizer saved in `directory` (a checkpoint's, or its copy beside data)."""
        directory = Path(directory)
        if not any((directory / name).is_file() for name in cls.FILES):
            raise UserError(
                f"{directory}: no tokenizer files ({', '.join(cls.FILES[:2])}); save the "
                "checkpoint's tokenizer beside it with tokenizer.save_pretrained(DIR)"
            )
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise UserError(
                "a checkpoint's tokenizer is read by transformers: pip install 'fixedfirst[looped]'"
            ) from None
        from fixedfirst.config.architectures import quiet_transformers

        try:
            with quiet_transformers():  # a model_type it does not know (our export) warns
                hf = AutoTokenizer.from_pretrained(
                    str(directory),
                    local_files_only=True,
                    split_special_tokens=True,
                    trust_remote_code=False,  # never run code; nor ask whether to (on stdout)
                )
        except (OSError, ValueError, KeyError, TypeError) as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise UserError(
                f"{directory}: its tokenizer cannot be read "
                f"({lines[0] if lines else type(e).__name__})"
            ) from None
        return cls(hf, str(directory))

    @property
    def start_id(self) -> int:
        return self.eod_id if self.bos_id is None else self.bos_id

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.backend is not None:  # parallel in Rust, no length warnings
            encoded = self.backend.encode_batch(list(texts), add_special_tokens=False)
            return [e.ids for e in encoded]
        return [self.hf.encode(t, add_special_tokens=False) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def description(self) -> dict:
        own = {"eod_token": self.hf.eos_token, "fingerprint": self.fingerprint}
        return {**super().description(), **own}

    def save(self, directory: Path) -> None:
        super().save(directory)
        self.hf.save_pretrained(str(directory))


def checkpoint_tokenizer(directory: str | Path) -> CheckpointTokenizer:
    """The tokenizer of the checkpoint directory `directory`, refused in one line when it has
    ids its model has no row for (it is not the model's tokenizer)."""
    from fixedfirst.config.run import model_section

    model = model_section({"checkpoint": str(directory)})
    tokenizer = CheckpointTokenizer.load(directory)
    if tokenizer.vocab_size > model.vocab_size:
        raise UserError(
            f"{directory}: its tokenizer has {tokenizer.vocab_size:,} ids and its model only "
            f"{model.vocab_size:,} (config.json): the tokenizer is not this model's; put the "
            "model's own tokenizer files beside its weights"
        )
    return tokenizer


def missing_files(directory: str | Path, kind: str) -> list[str]:
    """The files a saved tokenizer of `kind` needs that `directory` lacks (none: complete)."""
    needed = [DESCRIPTION_FILE, BPE_FILE] if kind == BpeTokenizer.kind else [DESCRIPTION_FILE]
    return [name for name in needed if not (Path(directory) / name).is_file()]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved in a DATA directory (or in its `tokenizer/` directory)."""
    path = Path(path)
    directory = path / TOKENIZER_DIR if (path / TOKENIZER_DIR).is_dir() else path
    description_file = directory / DESCRIPTION_FILE
    try:
        description = json.loads(description_file.read_text())
        kind = description["kind"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"{path}: no tokenizer here ({description_file} is missing or unreadable); "
            "make the data with `fixedfirst prepare INPUT... --out DATA`"
        ) from None
    if kind == ByteTokenizer.kind:
        tokenizer: Tokenizer = ByteTokenizer()
    elif kind == BpeTokenizer.kind:
        tokenizer = BpeTokenizer.load(directory)
    elif kind == CheckpointTokenizer.kind:
        tokenizer = CheckpointTokenizer.load(directory)
    elif kind == WordTokenizer.kind:
        words = description.get("words")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise UserError(f"{description_file}: a word tokenizer needs its list of words")
        tokenizer = WordTokenizer(words)
    else:
        raise UserError(f"{description_file}: unknown tokenizer kind {kind!r}")
    if tokenizer.vocab_size != description.get("vocab_size"):
        raise UserError(
            f"{description_file}: says vocab_size {description.get('vocab_size')}, "
            f"the saved tokenizer has {tokenizer.vocab_size}"
        )
    return tokenizer
