"""lm-evaluation-harness support: the `fixedfirst` model, so every harness task runs at any depth.

    fixedfirst-lm-eval --model fixedfirst --model_args run=RUN,depth=8 --tasks hellaswag
    fixedfirst downstream RUN --tasks hellaswag,piqa,arc_easy --depths 1,4,8,16

The stock `lm_eval` command cannot see a model defined outside its source tree, so the model is
reached through `fixedfirst-lm-eval`, `register()` in Python, or the entry point in
pyproject.toml (docs/design.md §18). Importing this package does not import lm_eval (an
optional dependency, `fixedfirst[harness]`); `register()` and `fixedfirst.harness.model` do.
"""

from __future__ import annotations

from fixedfirst.errors import UserError

MODEL_NAME = "fixedfirst"
MODEL_TARGET = "fixedfirst.harness.model:FixedFirstLM"
INSTALL_HINT = "pip install 'fixedfirst[harness]' (or pip install lm-eval)"


def require_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise UserError(f"this needs lm-evaluation-harness: {INSTALL_HINT}") from None


def register() -> None:
    """Make `fixedfirst` a model name in this process's lm_eval registry (lazily: the model
    class is imported when the harness first asks for it)."""
    require_lm_eval()
    # The registry imports the built-in models only while it is empty: add them first, or
    # registering ours would hide them.
    import lm_eval.models  # noqa: F401
    from lm_eval.api.registry import model_registry

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target=MODEL_TARGET)


__all__ = ["MODEL_NAME", "register", "require_lm_eval"]
