"""The inspection page in a real browser: headless Chromium opens it from disk, logs nothing to
its console (no error, no warning) and its screenshot shows the heat map in the page's colours.

Slow and not in `make test`: it needs Debian's Chromium (`apt-get install chromium`, about a
minute and 100+ packages), which the set-up does not install. Run it with

    apt-get install -y chromium
    .venv/bin/python -m pytest -m slow tests/test_inspect_browser.py
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.inspection import read_page_record

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As root, in a sandbox without a network: no sandbox, no GPU, and none of the background
# connections a fresh profile would try (docs of the machine this was written on).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1200,1000",
]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install chromium"),
]


def render(page, tmp_path) -> tuple[list[str], np.ndarray]:
    """The page's console messages and its screenshot (H, W, 3) as 0..255 integers."""
    shot = tmp_path / f"{page.stem}-shot.png"
    done = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), done.stderr[-2000:]
    import matplotlib.image

    pixels = np.round(matplotlib.image.imread(shot)[..., :3] * 255).astype(int)
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line], pixels


def heat_map_colours(pixels: np.ndarray, colormap: list[str]) -> dict[int, int]:
    """Pixels per colour of the page's colour map (index -> count), within 2/255 per channel."""
    stops = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in colormap])
    flat = pixels.reshape(-1, 3)
    counts = {}
    for index, stop in enumerate(stops):
        n = int((np.abs(flat - stop).max(axis=1) <= 2).sum())
        if n:
            counts[index] = n
    return counts


@pytest.fixture(scope="module")
def page(text_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "page.html"
    text = "the river stone lamp orbit cedar quartz violet harbor " * 6
    with pytest.raises(SystemExit) as e:
        main(
            [
                "inspect",
                str(text_run / "run"),
                "--prompt",
                text,
                "--depths",
                "1..12",
                "--out",
                str(out),
            ]
        )
    assert e.value.code == 0
    return out


def test_the_page_renders_without_console_messages_and_shows_the_heat_map(page, tmp_path):
    console, pixels = render(page, tmp_path)
    assert console == []
    colours = heat_map_colours(pixels, read_page_record(page)["colormap"])
    # the legend alone is 200 x 12 pixels; the heat map rows fill far more, in many colours
    assert sum(colours.values()) > 40_000, colours
    assert len(colours) >= 8, colours


def test_a_broken_page_is_caught(page, tmp_path):
    """The check above can fail: with its drawing code broken the page logs the error and the
    screenshot holds no heat map."""
    broken = tmp_path / "broken.html"
    html = page.read_text()
    assert html.count("\nbuild();\n") == 1
    broken.write_text(html.replace("\nbuild();\n", "\nbuild(undefinedName);\n"))
    console, pixels = render(broken, tmp_path)
    assert any("Uncaught" in line for line in console), console
    colours = heat_map_colours(pixels, read_page_record(page)["colormap"])
    assert sum(colours.values()) < 5_000, colours
