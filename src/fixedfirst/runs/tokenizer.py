"""The tokenizer a served model reads and writes text with, whatever data its run trained on.

A run's tokenizer is its data source's (`BatchSource.tokenizer`): the byte or BPE tokenizer saved
beside prepared token shards, or a task's word tokenizer rebuilt from the task's configuration;
data without text (the synthetic toy language) has none. Serving needs two more ids, which every
`Tokenizer` names: `start_id`, which every prompt and scored context begins with (every training
document followed one), and `stop_id`, where generation stops.

A run keeps a copy of its tokenizer in RUN/tokenizer, and an export (`fixedfirst export`) saves
it beside the weights (`Tokenizer.save`, read back by `load_tokenizer`), so neither needs the
data nor the task's generator to decode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.data.tokenizer import TOKENIZER_DIR, Tokenizer, load_tokenizer
from fixedfirst.errors import UserError
from fixedfirst.runs.opening import require_data, trained_source


def run_tokenizer(
    config: RunConfig,
    data_state: dict[str, Any] | None = None,
    required: bool = True,
    run_dir: str | Path | None = None,
    data: str | None = None,
) -> Tokenizer | None:
    """The tokenizer of a run: the copy in RUN/tokenizer (written when the run started, so
    serving needs nothing outside the run), or for a run without one (older runs, or data
    without text) the data's own, checked against the checkpoint's data state (which names
    the data the weights were trained on)."""
    if run_dir is not None and (Path(run_dir) / TOKENIZER_DIR).is_dir():
        tokenizer: Tokenizer | None = load_tokenizer(run_dir)
    else:
        if run_dir is not None:
            require_data(config, run_dir, data)  # `data`: --data, when given
        tokenizer = trained_source(config, data_state).tokenizer
    if tokenizer is None:
        if not required:
            return None
        raise UserError(
            f"this run trained on [data] kind = {config.data.kind!r}, data without text or "
            "tokenizer; generation and downstream evaluation need a run on text (kind 'tokens') "
            "or on a task with a vocabulary (e.g. 'bios')"
        )
    if tokenizer.vocab_size > config.model.vocab_size:
        raise UserError(
            f"the run's tokenizer has {tokenizer.vocab_size} ids, the model only "
            f"{config.model.vocab_size}"
        )
    return tokenizer


def tokenizer_summary(tokenizer: Tokenizer) -> dict[str, Any]:
    """What an export's config.json says about its tokenizer (the files hold the rest)."""
    return {
        "kind": tokenizer.kind,
        "vocab_size": tokenizer.vocab_size,
        "start_id": tokenizer.start_id,
        "stop_id": tokenizer.stop_id,
    }
