"""Prompt lookup's size on the command line: its flag, what it means as a decoder option, its spec syntax.

Import-light (argparse only): every command builds its parser from the methods' records (`specviz.methods`).
"""

from __future__ import annotations

import argparse

from ..methods import size_numbers

RANGED = ()   # its one size is checked by the decoder (`sizing.check_tokens`); the race asks for none
SPEC_SYNTAX = "prompt-lookup@TOKENS"


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("prompt-lookup")
    g.add_argument("--copy-tokens", type=int, default=None,
                   help="the most tokens a prompt lookup step copies from the text and verifies (1-16; default "
                        "10, each step cut to what the measured forward times say pays)")


def from_args(args: argparse.Namespace) -> dict:
    return {"tokens": args.copy_tokens}


def parse_sizes(sizes: str, spec: str) -> dict | None:
    """`8` as decoder options; None where the text is not prompt lookup's size."""
    numbers = size_numbers(sizes)
    return {"tokens": numbers[0]} if len(numbers) == 1 else None
