"""What `fixedfirst inspect` looks at: a text, a task's examples, or the run's own validation
sequences, each as the scored sequences the model sees (`ScoredSequence`).

A text starts with the start-of-document token, as every prompt does; each position is scored
against the next token, or, on a task whose targets are not the next tokens (chains), against
the task's own label for it (`DataKind.label`). Validation sequence i is row i of the batches
`fixedfirst eval` scores (eval's first batch holds sequences 0..micro_batch-1).
"""

from __future__ import annotations

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import ScoredSequence, data_kind
from fixedfirst.data.tokenizer import Tokenizer
from fixedfirst.errors import UserError
from fixedfirst.inspection.record import MAX_POSITIONS
from fixedfirst.model.kinds import LoopedModel
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.runs.opening import LoadedRun, trained_source


def parse_indices(text: str, option: str) -> list[int]:
    """'7' -> [7]; '0..15' -> [0, ..., 15]."""
    try:
        low, _, high = text.partition("..")
        first, last = int(low), int(high or low)
    except ValueError:
        raise UserError(f"{option} {text!r}: expected N or N..M, e.g. 3 or 0..15") from None
    if first < 0 or last < first:
        raise UserError(f"{option} {text!r}: expected 0 <= N <= M, got {first}..{last}")
    if last - first + 1 > MAX_POSITIONS:
        raise UserError(f"{option} {text!r}: at most {MAX_POSITIONS:,} sequences fit a page")
    return list(range(first, last + 1))


def text_sequence(
    tokenizer: Tokenizer | None, config: RunConfig | None, text: str, what: str
) -> ScoredSequence:
    """A text as the model reads it: start-of-document, then its tokens. `config` (None for an
    export) says which task labels it, if any."""
    if not text.strip():
        raise UserError(f"{what} is empty; give some text to inspect")
    if tokenizer is None:
        raise UserError(
            f"{what}: this model has no tokenizer (its run trained on data without text); "
            "inspect its validation sequences with --validation N"
        )
    ids = [tokenizer.start_id, *tokenizer.encode(text)]
    kind = None if config is None else data_kind(config.data.kind)
    if config is not None and kind is not None and kind.label is not None:
        sequence = kind.label(config, ids)
        sequence.title = f"{what}, labelled as the {kind.name} task labels it"
    else:
        sequence = ScoredSequence(ids[:-1], ids[1:], what)
    if all(t == IGNORE_INDEX for t in sequence.targets):
        raise UserError(f"{what}: no position of it is scored (the task labels none of it)")
    return sequence


def task_examples(
    config: RunConfig | None, indices: list[int], option: str
) -> list[ScoredSequence]:
    """Examples `indices` of the run's task, with their answers marked."""
    kind = None if config is None else data_kind(config.data.kind)
    if config is None or kind is None or kind.example is None:
        trained = "an export" if kind is None else f"a run on [data] kind = {kind.name!r}"
        raise UserError(
            f"{option} needs a run on a task with examples (chains, bios), not {trained}; "
            "use --prompt, --file or --validation"
        )
    return [kind.example(config, i) for i in indices]


def validation_sequences(
    loaded: LoadedRun[LoopedModel] | None, indices: list[int], option: str
) -> list[ScoredSequence]:
    """Rows `indices` of the run's validation batches, as eval scores them."""
    if loaded is None:
        raise UserError(f"{option} needs a run directory (an export has no data)")
    source = trained_source(loaded.config, loaded.checkpoint.meta.get("data"))
    try:
        (batch,) = source.validation_batches(1, indices[-1] + 1)
    except UserError:
        raise UserError(
            f"{option} {indices[-1]}: the run's validation data holds fewer than "
            f"{indices[-1] + 1} sequences"
        ) from None
    return [
        ScoredSequence(batch.inputs[i].tolist(), batch.targets[i].tolist(), f"validation {i}")
        for i in indices
    ]
