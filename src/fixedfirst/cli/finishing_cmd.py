"""`fixedfirst finishing`: finishing stages of every length and rate for runs trained at one
depth, scored by depth."""

from __future__ import annotations

import argparse

from fixedfirst.cli.studies import add_study_arguments, conduct_depth_arms


def register(parser: argparse.ArgumentParser) -> None:
    presets = (
        "dense (our chains model at K = 4), moe (the looped mixture-of-experts at 2 passes), "
        "standin-chains and standin-text (an Inkling2Loop of ours at 3 passes, on chains and on "
        "text, with a control and a low-rank finish), smoke (seconds), or a preset .toml"
    )
    add_study_arguments(parser, "their finishing stages", presets)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.finishing.experiment import load_preset

    return conduct_depth_arms(load_preset, args)
