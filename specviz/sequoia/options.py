"""Sequoia's sizes on the command line: its flags, what they mean as decoder options, its spec syntax.

Import-light (argparse only): every command builds its parser from the methods' records (`specviz.methods`).
"""

from __future__ import annotations

import argparse

from ..errors import InvalidInput
from ..methods import size_numbers

RANGED = ("tree_budget", "tree_depth")   # checked against the race's ranges (`request.RANGES`)
SPEC_SYNTAX = "sequoia@BUDGETxDEPTH, sequoia@adaptive[=T]"
SWEEP = ("8x4", "16x5", "32x6", "64x8")   # the fixed sizes `bench --sweep` adds (tokens/s against size)


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sequoia")
    g.add_argument("--tree", choices=["auto", "adaptive"], default=None,
                   help="auto: the DP's tree from measured acceptance and forward times (the default); "
                        "adaptive: grow each step's tree from the draft's confidence "
                        "(--tree-budget / --tree-depth cap it)")
    g.add_argument("--tree-threshold", type=float, default=None,
                   help="adaptive: smallest path score (product of ranked draft probabilities) worth a node")
    g.add_argument("--tree-budget", type=int, default=None, help="tree nodes including the root (N)")
    g.add_argument("--tree-depth", type=int, default=None, help="speculated levels (D)")


def from_args(args: argparse.Namespace) -> dict:
    if args.tree == "adaptive":
        return {"tree": "adaptive", "tree_budget": args.tree_budget, "tree_depth": args.tree_depth,
                "tree_threshold": args.tree_threshold}
    if args.tree_threshold is not None:
        raise InvalidInput("--tree-threshold belongs to --tree adaptive")
    if args.tree == "auto" and (args.tree_budget is not None or args.tree_depth is not None):
        raise InvalidInput("--tree auto cannot be combined with --tree-budget/--tree-depth")
    if (args.tree_budget is None) != (args.tree_depth is None):
        raise InvalidInput("give both --tree-budget and --tree-depth, or neither (auto)")
    return {"tree_budget": args.tree_budget, "tree_depth": args.tree_depth}


def parse_sizes(sizes: str, spec: str) -> dict | None:
    """`16x4` or `adaptive[=T]` as decoder options; None where the text is not Sequoia's sizes."""
    if sizes.partition("=")[0] == "adaptive":   # sequoia@adaptive, sequoia@adaptive=0.03
        threshold = sizes.partition("=")[2]
        try:
            return {"tree": "adaptive"} | ({"tree_threshold": float(threshold)} if threshold else {})
        except ValueError:
            raise InvalidInput(f"cannot read the threshold in '{spec}': use sequoia@adaptive=0.05") from None
    numbers = size_numbers(sizes)
    return {"tree_budget": numbers[0], "tree_depth": numbers[1]} if len(numbers) == 2 else None


# -- its settings in a race request (`specviz.request.RaceRequest`: tree, tree_budget, tree_depth) --------------

def request_sizes(request) -> dict:
    """The request's tree settings checked: the sizes a manual tree uses, None where `auto` chooses them."""
    from ..request import RANGES, TREE_MODES, check_choice, check_tree

    check_choice("tree", request.tree, TREE_MODES)
    sizes = {"tree_budget": None, "tree_depth": None}
    if request.tree == "manual":
        sizes = {name: RANGES[name].check(getattr(request, name)) for name in sizes}
        check_tree(sizes["tree_budget"], sizes["tree_depth"])
    return sizes


def request_options(request) -> dict:
    """A validated request's tree as the decoder's options ('auto' sizes are None)."""
    from ..request import ILLUSTRATIVE_TREE

    if request.tree == "adaptive":   # its own limits (the target's free rows, 8 levels, threshold 0.05)
        return {"tree": "adaptive", "tree_budget": None, "tree_depth": None}
    if request.tree == "illustrative":
        return dict(ILLUSTRATIVE_TREE)
    if request.tree == "manual":
        return {"tree_budget": request.tree_budget, "tree_depth": request.tree_depth}
    return {"tree_budget": None, "tree_depth": None}
