"""The documentation is generated where it can be and held to the code where it is written:
the configuration reference is the code's word for word, the guides name every schedule kind and
sweep key the code accepts, the outputs of deterministic commands are what the commands print
today, and every guide and study report is one click from the site's index."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_config_reference_is_current():
    generated = subprocess.run(
        [sys.executable, "-m", "fixedfirst", "config-reference", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    page = (DOCS / "guides" / "configuration.md").read_text()
    start = page.index("<!-- config-reference:start -->\n") + len(
        "<!-- config-reference:start -->\n"
    )
    end = page.index("<!-- config-reference:end -->")
    assert page[start:end] == generated, (
        "the configuration reference is stale: run `python scripts/update_config_reference.py`"
    )


def test_the_schedules_guide_lists_every_schedule_kind():
    from fixedfirst.config.sections import ScheduleConfig

    kinds = set(typing.get_args(typing.get_type_hints(ScheduleConfig)["kind"]))
    page = (DOCS / "guides" / "schedules.md").read_text()
    listed = set(re.findall(r"^\| `([a-z-]+)` \|", page, flags=re.M))
    assert listed == kinds


def test_the_configuration_guide_names_every_sweep_key():
    from dataclasses import fields

    from fixedfirst.studies.sweep import spec
    from fixedfirst.studies.sweep.claims import CLAIMS
    from fixedfirst.studies.sweep.factors import FactorSpec, GapSpec
    from fixedfirst.studies.sweep.settings import SweepSettings

    page = (DOCS / "guides" / "configuration.md").read_text()
    sections = (SweepSettings, GapSpec, FactorSpec)
    tables = [f.name for section in sections for f in fields(section)] + list(CLAIMS.keys)
    keys = {*spec.TOP_LEVEL_KEYS, *spec.RUN_KEYS, *tables}
    spelled = ("`{}`", "{} =", "[{}]", "[[{}]]")
    missing = sorted(k for k in keys if not any(s.format(k) in page for s in spelled))
    assert not missing, f"docs/guides/configuration.md does not describe: {missing}"


# Outputs committed under docs/figures that a command prints the same on any machine (the compute
# model and the planner's table of GPUs): the command is the file's first line, or given here.
DETERMINISTIC_OUTPUTS = {
    "compute-lm-200m.txt": ["compute", "configs/lm-200m.toml"],
    "compute-lm-200m-switch-0.8.txt": [
        "compute",
        "configs/lm-200m.toml",
        "--set",
        "schedule.switch=0.8",
    ],
    "compute-lm-200m-k0-4.txt": ["compute", "configs/lm-200m.toml", "--set", "schedule.k0=4"],
    "plan-lm-200m.txt": None,
    "plan-lm-1b.txt": None,
    "plan-gpu-lm-code.txt": None,
    "compute-inkling-tiny.txt": ["compute", "configs/inkling-tiny.toml"],
}
NEEDS_INKLING = {"compute-inkling-tiny.txt"}
"""Outputs of a transformers looped model's run: skipped where transformers lacks it."""


@pytest.mark.parametrize("name", sorted(DETERMINISTIC_OUTPUTS))
def test_committed_command_outputs_are_what_the_commands_print(name, monkeypatch):
    from fixedfirst.cli.main import main
    from tests.inkling_helpers import HAS_INKLING

    if name in NEEDS_INKLING and not HAS_INKLING:
        pytest.skip("this transformers has no Inkling2Loop models (5.24 or later does)")
    committed = (DOCS / "figures" / name).read_text()
    argv = DETERMINISTIC_OUTPUTS[name]
    if argv is None:  # the file starts with the command that printed it
        first, committed = committed.split("\n", 1)
        assert first.startswith("$ fixedfirst ")
        argv = first.removeprefix("$ fixedfirst ").split()
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code in (0, None)
    assert out.getvalue() == committed, f"docs/figures/{name} is stale: rerun `fixedfirst {argv}`"


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_guide_and_study_is_in_the_nav_and_one_click_from_the_index():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = nav_pages(config["nav"])
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml names pages that do not exist: {missing}"
    index = (DOCS / "index.md").read_text()
    for folder in ("guides", "studies"):
        for page in sorted((DOCS / folder).glob("*.md")):
            name = f"{folder}/{page.name}"
            assert name in nav, f"{name} is not in mkdocs.yml's nav"
            assert f"]({name})" in index, f"docs/index.md does not link {name}"


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for command in ("make demo", "make test"):
        assert command in readme
    for page in sorted((DOCS / "studies").glob("*.md")):
        assert f"](docs/studies/{page.name})" in readme, f"README does not link {page.name}"


def test_the_readmes_links_resolve():
    """README.md is not part of the site, so mkdocs does not check its links: every relative link
    names a file of the repository, and every #anchor a heading of the README (GitHub's slugs)."""
    readme = (ROOT / "README.md").read_text()
    slugs = {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", readme, flags=re.M)
    }
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert len(links) >= 20
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        if path:
            assert (ROOT / path).exists(), f"README links {link}, which does not exist"
        else:
            assert anchor in slugs, f"README links #{anchor}, which is no heading of it"


# Files named in the pages written by hand and in the package's, benchmarks' and scripts' own
# words (docstrings, comments): a path (`model/looped.py`, `src/fixedfirst/...`,
# `benchmarks/serving.py`) or a bare module name (`memory.py`). The log is history and may name
# modules that have moved since; generated pages say what their generators write.
PYTHON_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[A-Za-z_]\w*\.py)\b")
ELSEWHERE = {"recpre/raven_modeling_minimal.py"}  # in Huginn's repository (design §19)
NOT_WRITTEN_BY_HAND = ("figures", "probes", "diagnose", "log.md", "reference/bad-input.md")


def python_files_named(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(1))
        for m in PYTHON_FILE.finditer(text)
        if m.group(1) not in ELSEWHERE
    ]


def test_every_python_file_the_docs_and_docstrings_name_exists():
    """A module that moved or was renamed leaves its old name in the words about it
    (`cli/decoding_flags.py`, `hardware.py`): every file named resolves to one in the repository,
    from the root, from src/ or src/fixedfirst/, beside the naming file, or, for a path, as the
    tail of one; a bare name to a module of that name anywhere."""
    ours = [
        p
        for folder in ("src", "benchmarks", "scripts", "tests")
        for p in (ROOT / folder).rglob("*.py")
    ]
    names = {p.name for p in ours}
    tails = {p.relative_to(ROOT).as_posix() for p in ours}
    sources = [*(ROOT / "src" / "fixedfirst").rglob("*.py"), ROOT / "README.md"]
    sources += [*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "scripts").glob("*.py")]
    sources += [
        page
        for page in DOCS.rglob("*.md")
        if not page.relative_to(DOCS).as_posix().startswith(NOT_WRITTEN_BY_HAND)
    ]

    def exists(name: str, where: Path) -> bool:
        if "/" not in name:
            return name in names
        bases = (ROOT, ROOT / "src", ROOT / "src" / "fixedfirst", where.parent)
        return any((base / name).is_file() for base in bases) or any(
            tail.endswith("/" + name) for tail in tails
        )

    missing = [
        f"{source.relative_to(ROOT)}:{line}: {name}"
        for source in sources
        for line, name in python_files_named(source)
        if not exists(name, source)
    ]
    assert not missing, "files named that do not exist:\n" + "\n".join(missing)


API_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)


def test_every_name_the_package_exports_is_on_the_api_page():
    """A name `import fixedfirst` offers is rendered on docs/guides/api.md from its docstring:
    a `::: module.Name` directive of the module that defines it, or that module's directive
    listing it among its members (or listing none: the whole module). ScheduleConfig, exported
    for loops of one's own, was named on the page and never shown (issue 57)."""
    import fixedfirst

    rendered: dict[str, list[str] | None] = {}
    for m in API_DIRECTIVE.finditer((DOCS / "guides" / "api.md").read_text()):
        options = yaml.safe_load(m.group(2)) if m.group(2).strip() else None
        members = (options or {}).get("options", {}).get("members")
        rendered[m.group(1)] = members
    missing = []
    for name in fixedfirst.__all__:
        module = getattr(fixedfirst, name).__module__
        members = rendered.get(module, [])
        if f"{module}.{name}" not in rendered and not (members is None or name in members):
            missing.append(f"{name} (defined in {module})")
    assert not missing, f"not rendered on docs/guides/api.md: {', '.join(missing)}"


def unclosed_fence(text: str) -> int | None:
    """The line of a code fence (three or more backticks) that nothing closes, else None. A
    fence is closed by a line of at least as many backticks and nothing else, indented as far
    or less (CommonMark)."""
    opened: tuple[int, int, int] | None = None  # (line, backticks, indent)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        ticks = len(stripped) - len(stripped.lstrip("`"))
        if ticks < 3:
            continue
        if opened is None:
            opened = (number, ticks, len(line) - len(stripped))
        elif ticks >= opened[1] and not stripped.strip("`").strip():
            opened = None
    return None if opened is None else opened[0]


def test_every_code_fence_on_the_site_is_closed():
    """An unclosed fence turns the rest of the page into one code block (a lone ``` showed on
    the Export page, issue 57)."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    unclosed = [
        f"{page.relative_to(ROOT)}:{line}"
        for page in pages
        if (line := unclosed_fence(page.read_text())) is not None
    ]
    assert not unclosed, f"code fences never closed: {unclosed}"


def test_the_readmes_python_runs_and_its_loop_follows_the_plan():
    """README.md's Python blocks, in order in one namespace: the library's calls, then the loop
    of "In your own loop", whose every training forward runs the depth the plan gives its step
    (counted as core iterations: a scheduler that set no depth, or the wrong one, fails)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)
    assert len(blocks) == 2
    namespace: dict[str, typing.Any] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    model = namespace["model"]
    ran: list[int] = []
    model.core[0].register_forward_hook(lambda *_: ran.append(1))
    iterations: list[int] = []
    real_loss = None

    def counted(*args: typing.Any, **kwargs: typing.Any) -> typing.Any:
        ran.clear()
        out = real_loss(*args, **kwargs)
        iterations.append(len(ran))
        return out

    setup, loop = blocks[1].split("for step in range(plan.total_steps):")
    exec(compile(setup, "README.md", "exec"), namespace)
    real_loss, namespace["loss_of"] = namespace["loss_of"], counted
    exec(compile("for step in range(plan.total_steps):" + loop, "README.md", "exec"), namespace)
    plan = namespace["plan"]
    assert iterations == [plan.at(step).depth for step in range(plan.total_steps)]
    assert {plan.at(step).phase for step in range(plan.total_steps)} == {"fixed", "finish"}


def test_the_readmes_command_table_has_every_command():
    from fixedfirst.cli.main import COMMANDS

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Commands") :]
    missing = [name for name in COMMANDS if f"| `fixedfirst {name}" not in table]
    assert missing == []
