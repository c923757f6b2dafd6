"""Bad inputs of `fixedfirst inspect`, run like every other case of tests/bad_input_cases.py
(which lists them in its table, docs/reference/bad-input.md)."""

from __future__ import annotations

from tests.bad_input_cases import Case

INSPECT = ["inspect", "tokens-run", "--out", "page.html"]
RUN = ("tokens-run", "data")

INSPECT_CASES: list[Case] = [
    Case(
        "inspect-prompt-empty",
        "inspect",
        "`inspect --prompt ''` (no text)",
        [*INSPECT, "--prompt", ""],
        "--prompt '' is empty; give some text to inspect",
        needs=RUN,
    ),
    Case(
        "inspect-file-blank",
        "inspect",
        "`inspect --file notes.txt` of a file holding only blank lines",
        [*INSPECT, "--file", "notes.txt"],
        "--file notes.txt is empty; give some text to inspect",
        needs=RUN,
        files={"notes.txt": "\n\n  \n"},
    ),
    Case(
        "inspect-file-not-utf8",
        "inspect",
        "`inspect --file` of a Latin-1 file",
        [*INSPECT, "--file", "latin1.txt"],
        "--file latin1.txt is not UTF-8 text (byte 4 is 0xe9)",
        needs=RUN,
        files={"latin1.txt": b"caf\xe9 au lait\n"},
    ),
    Case(
        "inspect-depth-beyond-limit",
        "inspect",
        "`inspect --depths 1..16,2048` (a depth beyond the limit)",
        [*INSPECT, "--prompt", "river", "--depths", "1..16,2048"],
        "depths must be <= 1,024 (the cost grows linearly with depth), got 2,048",
        needs=RUN,
    ),
    Case(
        "inspect-too-many-depths",
        "inspect",
        "`inspect --depths 1..100` (more depths than a page has rows)",
        [*INSPECT, "--prompt", "river", "--depths", "1..100"],
        "--depths: 100 depths; a page shows at most 64 (one row each)",
        needs=RUN,
    ),
    Case(
        "inspect-max-depth-beyond-depths",
        "inspect",
        "`inspect --depths 1..8 --max-depth 16` (rules may stop where the page has no row)",
        [*INSPECT, "--prompt", "river", "--depths", "1..8", "--max-depth", "16"],
        "--max-depth 16 is beyond the deepest of --depths (8)",
        needs=RUN,
    ),
    Case(
        "inspect-out-not-ours",
        "inspect",
        "`inspect --out page.html` where page.html is someone else's page",
        [*INSPECT, "--prompt", "river"],
        "--out page.html exists and was not written by fixedfirst; nothing was written",
        needs=RUN,
        files={"page.html": "<html><body>my notes</body></html>\n"},
    ),
    Case(
        "inspect-picture-not-ours",
        "inspect",
        "`inspect --out page.html` where page.png beside it is someone else's picture",
        [*INSPECT, "--prompt", "river"],
        "--out's picture page.png exists and was not written by fixedfirst",
        needs=RUN,
        files={"page.png": b"\x89PNG\r\n\x1a\n a holiday photo"},
    ),
    Case(
        "inspect-out-not-html",
        "inspect",
        "`inspect --out page.txt`",
        ["inspect", "tokens-run", "--prompt", "river", "--out", "page.txt"],
        "--out page.txt: the page is written as .html (PAGE.png goes beside it)",
        needs=RUN,
    ),
    Case(
        "inspect-task-example-of-text-run",
        "inspect",
        "`inspect --task-example 0` of a run on text (no task)",
        [*INSPECT, "--task-example", "0"],
        "--task-example needs a run on a task with examples (chains, bios), not a run on "
        "[data] kind = 'tokens'",
        needs=RUN,
    ),
    Case(
        "inspect-validation-beyond-data",
        "inspect",
        "`inspect --validation 5000` of a run with fewer validation sequences",
        [*INSPECT, "--validation", "5000"],
        "--validation 5000: the run's validation data holds fewer than 5001 sequences",
        needs=RUN,
    ),
    Case(
        "inspect-range-backwards",
        "inspect",
        "`inspect --validation 7..3`",
        [*INSPECT, "--validation", "7..3"],
        "--validation '7..3': expected 0 <= N <= M, got 7..3",
        needs=RUN,
    ),
    Case(
        "inspect-threshold-unknown-rule",
        "inspect",
        "`inspect --threshold latent=0.1` (an exit rule that does not exist)",
        [*INSPECT, "--prompt", "river", "--threshold", "latent=0.1"],
        "--threshold 'latent=0.1': expected RULE=T with RULE one of kl, entropy, state, argmax",
        needs=RUN,
    ),
    Case(
        "inspect-cache-zero-slots",
        "inspect",
        "`inspect --cache bounded:0`",
        [*INSPECT, "--prompt", "river", "--cache", "bounded:0"],
        "--cache bounded:0: a bounded cache keeps S >= 1 slots per core layer, got S = 0",
        needs=RUN,
    ),
]
