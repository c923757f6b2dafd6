"""`fixedfirst moe`: fixed-first on a looped mixture-of-experts, at matched modeled FLOPs."""

from __future__ import annotations

import argparse

from fixedfirst.cli.studies import add_study_arguments, conduct_depth_arms


def register(parser: argparse.ArgumentParser) -> None:
    presets = "default (4 schedules x 3 seeds), smoke (seconds), or a preset .toml"
    add_study_arguments(parser, "scoring them", presets)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.moe.experiment import load_preset

    return conduct_depth_arms(load_preset, args)
