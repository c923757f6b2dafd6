"""A property: whatever a user writes into a valid configuration (a wrong type, a negative
number, a huge one, NaN, a string, a table), `fixedfirst compute` either works or says what is
wrong in one line with exit status 2, never a traceback."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixedfirst.cli.main import main
from fixedfirst.config import SECTIONS, field_docs
from fixedfirst.config.schema import toml_value
from tests.trainer_helpers import tiny_config

KEYS = [(s.SECTION, name) for s in SECTIONS for name, _, _ in field_docs(s)]
KEYS += [("data.bios", "people"), ("data.bios", "cities")]
EXTREMES = [
    0,
    1,
    -1,
    2,
    3,
    7,
    1024,
    1025,
    2**31,
    2**53,
    2**63 - 1,
    -(2**63),
    0.0,
    0.5,
    -0.5,
    1.0,
    1.5,
    1e-300,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    True,
    False,
    "",
    "x",
    "auto",
    "fixed",
    "bios",
    "tokens",
    [],
    [0],
    [1, 2**40],
    [0.5, 2.0],
]


def toml_literal(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return toml_value(value)


def toml_text(config: dict) -> str:
    """A raw configuration dict as TOML (a nested table under its section)."""
    lines = []
    for section, values in config.items():
        lines.append(f"[{section}]")
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines += [f"{k} = {toml_literal(v)}" for k, v in values.items() if k not in tables]
        for name, table in tables.items():
            lines.append(f"[{section}.{name}]")
            lines += [f"{k} = {toml_literal(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@st.composite
def mutated_configs(draw) -> str:
    config = tiny_config().to_dict()
    for _ in range(draw(st.integers(1, 3))):
        section, key = draw(st.sampled_from(KEYS))
        value = draw(st.sampled_from(EXTREMES))
        if section == "data.bios":
            config["data"]["kind"] = "bios"
            config["data"].setdefault("bios", {})[key] = value
        else:
            config[section][key] = value
    return toml_text(config)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated_configs())
def test_mutated_configs_never_end_in_a_traceback(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("mutation") / "run.toml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main(["compute", str(path)])
    except SystemExit as e:
        code = e.code
    assert code in (0, 2), (text, err.getvalue())
    if code == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fixedfirst compute: error: "), text
