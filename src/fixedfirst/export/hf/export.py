"""`fixedfirst export RUN --out DIR --format hf` (docs/design.md §9): a transformers model.

DIR loads with `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` and
`AutoTokenizer.from_pretrained(DIR)` alone, and lm-eval's stock `hf` model evaluates it. The
evaluation initial state is stored with the weights, so the export reproduces fixedfirst's
logits whatever torch version draws differently. The directory is listed in
docs/reference/files.md.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from fixedfirst.config.checkpoints import OWN_DEPTH_KEY, OWN_EXPORT_KEYS, OWN_MODEL_TYPE
from fixedfirst.errors import UserError
from fixedfirst.export.hf.tokenizer import hf_tokenizer_files
from fixedfirst.export.writer import check_out_dir, write_directory
from fixedfirst.model import FULL_CACHE, BoundedCache, CacheStrategy, LoopedTransformer
from fixedfirst.runs.exported import is_export
from fixedfirst.runs.served import load_served

MODELING_FILE = "modeling_fixedfirst.py"
MODEL_TYPE = OWN_MODEL_TYPE


def hf_config(
    model_config: dict[str, Any],
    depth: int,
    tokenizer,
    provenance: dict,
    cache: CacheStrategy = FULL_CACHE,
) -> dict:
    """config.json: fixedfirst's [model] keys under transformers' usual names where there is one;
    the cache strategy as `cache_slots` (null: the full cache)."""
    from fixedfirst.config import ModelConfig, build_section

    shape = build_section(ModelConfig, model_config)
    keys = {name: getattr(shape, key) for key, name in OWN_EXPORT_KEYS.items()}
    keys["intermediate_size"] = shape.hidden_size  # the width in use (d_ff may be unset)
    return {
        "architectures": ["FixedFirstForCausalLM"],
        "model_type": MODEL_TYPE,
        "auto_map": {
            "AutoConfig": "modeling_fixedfirst.FixedFirstConfig",
            "AutoModelForCausalLM": "modeling_fixedfirst.FixedFirstForCausalLM",
        },
        **keys,
        OWN_DEPTH_KEY: depth,
        "cache_slots": cache.size if isinstance(cache, BoundedCache) else None,
        "bos_token_id": tokenizer.start_id,
        "eos_token_id": tokenizer.stop_id,
        "pad_token_id": getattr(tokenizer, "pad_id", tokenizer.stop_id),
        "dtype": "float32",
        "use_cache": True,
        "fixedfirst": provenance,
    }


def model_card(config: dict[str, Any]) -> str:
    source = config["fixedfirst"]
    return f"""---
library_name: transformers
tags: [fixedfirst, looped-transformer, adaptive-depth]
---
# A fixedfirst looped transformer

Exported by `fixedfirst export --format hf` from `{source["run"]}` step {source["step"]}
({source["schedule"]}). One shared core block is applied `depth` times between a prelude and a
coda; the same weights serve any depth (default {config["depth"]}, the deepest it trained at).

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

path = "."  # this directory, or its id on a hub
model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
inputs = tokenizer("Q: Why", return_tensors="pt")  # the start-of-document token comes first
out = model.generate(**inputs, max_new_tokens=40, depth=8)  # or model.config.depth = 8
print(tokenizer.decode(out[0], skip_special_tokens=True))
```

Sampling as `fixedfirst generate --seed S --temperature T` does: `torch.manual_seed(S)`, then
`generate(..., do_sample=True, temperature=T, top_k=0)`.
"""


def export_hf(
    run: str | Path,
    out: str | Path,
    step: int | None = None,
    cache: CacheStrategy = FULL_CACHE,
    depth: int | None = None,
    card: str | None = None,
) -> dict[str, Any]:
    """Write the run's checkpoint at `step` (default: the newest) as a transformers model into
    `out`, generating through the `cache` strategy and at `depth` (default: the deepest the run
    trained at) by default, its README.md `card` (default: `model_card`'s); return its
    config.json."""
    from fixedfirst import __version__
    from fixedfirst.runs.checkpoint import MODEL_FILE, save_weights, tied_aliases
    from fixedfirst.schedules import describe

    out = Path(out)
    check_out_dir(out)
    if is_export(run):
        raise UserError(f"{run} is already an export; export takes a run directory")
    served = load_served(run, step, require_tokenizer=False)
    assert served.run is not None
    loaded = served.run
    own = loaded.config.own_model("fixedfirst export --format hf")
    assert isinstance(loaded.model, LoopedTransformer)
    if served.tokenizer is None:
        raise UserError(
            f"--format hf needs a tokenizer, and this run trained on [data] kind = "
            f"{loaded.config.data.kind!r} (no text); export it in fixedfirst's format instead"
        )
    model_config = loaded.config.to_dict()["model"]
    files = hf_tokenizer_files(served.tokenizer, loaded.config.model.max_seq_len)
    provenance = {
        "run": str(run),
        "step": loaded.checkpoint.step,
        "tokens": loaded.checkpoint.meta.get("tokens"),
        "schedule": describe(loaded.config.schedule),
        "weights_sha256": loaded.checkpoint.meta["files"][MODEL_FILE],
        "tokenizer": served.tokenizer.kind,
        "version": __version__,
    }
    serving = served.default_depth if depth is None else depth
    config = hf_config(model_config, serving, served.tokenizer, provenance, cache)
    model = loaded.model
    aliases = tied_aliases(model)
    weights = {
        k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in aliases
    }
    if own.state_init == "normal":
        weights["eval_state"] = model.eval_state.detach().cpu().contiguous()
    generation = {
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"],
    }
    files["config.json"] = json.dumps(config, indent=2) + "\n"
    files["generation_config.json"] = json.dumps(generation, indent=2) + "\n"
    files[MODELING_FILE] = (resources.files("fixedfirst.export.hf") / MODELING_FILE).read_text()
    files["README.md"] = model_card(config) if card is None else card

    def fill(directory: Path) -> None:
        save_weights(weights, directory / "model.safetensors")
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")

    write_directory(out, fill)
    return config
