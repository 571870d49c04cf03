"""Lookahead's sizes on the command line: its flags, what they mean as decoder options, its spec syntax.

Import-light (argparse only): every command builds its parser from the methods' records (`specviz.methods`).
"""

from __future__ import annotations

import argparse

from ..errors import InvalidInput
from ..methods import size_numbers

RANGED = ("window", "ngram", "guesses")   # checked against the race's ranges (`request.RANGES`)
SPEC_SYNTAX = "lookahead@WxNxG"
SWEEP = ("3x3x3", "5x4x5", "7x4x7", "10x5x10")   # the fixed sizes `bench --sweep` adds (tokens/s against size)


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("lookahead")
    g.add_argument("--lookahead", choices=["auto"], default=None,
                   help="choose W, N, G from the measured forward cost (the default)")
    g.add_argument("--window", type=int, default=None, help="W: Jacobi window width")
    g.add_argument("--ngram", type=int, default=None, help="N: n-gram size")
    g.add_argument("--guesses", type=int, default=None, help="G: candidates verified per step")
    g.add_argument("--pool-from-prompt", action=argparse.BooleanOptionalAction, default=True,
                   help="seed the n-gram pool with the prompt's n-grams")


def from_args(args: argparse.Namespace) -> dict:
    sizes = (args.window, args.ngram, args.guesses)
    if args.lookahead == "auto" and any(v is not None for v in sizes):
        raise InvalidInput("--lookahead auto cannot be combined with --window/--ngram/--guesses")
    if any(v is None for v in sizes) and any(v is not None for v in sizes):
        raise InvalidInput("give all of --window, --ngram and --guesses, or none (auto)")
    return {"window": args.window, "ngram": args.ngram, "guesses": args.guesses,
            "pool_from_prompt": args.pool_from_prompt}


def parse_sizes(sizes: str, spec: str) -> dict | None:
    """`4x3x4` as decoder options; None where the text is not Lookahead's sizes."""
    numbers = size_numbers(sizes)
    return {"window": numbers[0], "ngram": numbers[1], "guesses": numbers[2]} if len(numbers) == 3 else None


# -- its settings in a race request (`specviz.request.RaceRequest`: lookahead, window, ngram, guesses) ----------

def request_sizes(request) -> dict:
    """The request's window settings checked: the sizes a manual window uses, None where `auto` chooses them."""
    from ..request import LOOKAHEAD_MODES, RANGES, check_choice

    check_choice("lookahead", request.lookahead, LOOKAHEAD_MODES)
    sizes = {"window": None, "ngram": None, "guesses": None}
    if request.lookahead == "manual":
        sizes = {name: RANGES[name].check(getattr(request, name)) for name in sizes}
    return sizes


def request_options(request) -> dict:
    """A validated request's window as the decoder's options ('auto' sizes are None)."""
    from ..request import ILLUSTRATIVE_LOOKAHEAD

    options = {"window": None, "ngram": None, "guesses": None, "pool_from_prompt": bool(request.pool_from_prompt)}
    if request.lookahead == "illustrative":
        options.update(ILLUSTRATIVE_LOOKAHEAD)
    elif request.lookahead == "manual":
        options.update(window=request.window, ngram=request.ngram, guesses=request.guesses)
    return options
