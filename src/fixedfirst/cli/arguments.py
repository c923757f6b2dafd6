"""Arguments shared by several subcommands: a config file with `--set` overrides, depth lists."""

from __future__ import annotations

import argparse

from fixedfirst.config import RunConfig, load_config
from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.errors import UserError


def add_config_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "config",
        nargs=None if required else "?",
        metavar="CONFIG.toml",
        help="run configuration (TOML with [model] [schedule] [train] [data] [eval])",
    )
    add_set_argument(parser)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one configuration value, e.g. --set schedule.k0=4 (repeatable)",
    )


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="where the run's data is now, when it moved from the data.path the run stores",
    )


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache",
        default="full",
        metavar="STRATEGY",
        help="which core entries the KV cache keeps per token: full (default: one per "
        "iteration), bounded:S (S slots per core layer, iteration i in slot i mod S, whatever "
        "the depth) or last (the last iteration only, bounded:1); docs/guides/serving-cache.md",
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The configuration file plus `--set` overrides, with its data kind and the kind's options
    checked (and their defaults filled in) before any command starts work."""
    from fixedfirst.data.registry import resolve_data

    return resolve_data(load_config(args.config, args.overrides, written=True))


def parse_depths(text: str) -> list[int]:
    """'1..16,32,64' -> [1, 2, ..., 16, 32, 64]; every depth must be >= 1."""
    depths: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if hi < lo:
                    raise ValueError
                bounds = [lo, hi]
            else:
                bounds = [int(part)]
        except ValueError:
            raise UserError(
                f"--depths {text!r}: expected comma-separated depths or ranges, e.g. 1..16,32,64"
            ) from None
        if bounds[0] < 1:
            raise UserError(f"--depths {text!r}: depths must be >= 1, got {bounds[0]}")
        if bounds[-1] > MAX_DEPTH:  # checked before a range is spelled out
            raise UserError(
                f"--depths {text!r}: depths must be <= {MAX_DEPTH:,} (the cost grows linearly "
                f"with depth), got {bounds[-1]:,}"
            )
        depths.extend(range(bounds[0], bounds[-1] + 1))
    return sorted(set(depths))


def format_depths(depths: list[int]) -> str:
    """[1, 2, ..., 16, 32, 64] -> '1..16,32,64': the inverse of parse_depths."""
    parts: list[str] = []
    ordered = sorted(set(depths))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        run = ordered[i : j + 1]
        parts.append(f"{run[0]}..{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
        i = j + 1
    return ",".join(parts)
