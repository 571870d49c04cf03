"""Lookahead's command: `optimize-lookahead` (the measured cost and the (W, N, G) `auto` picks).

`register(subparsers)` is called from `specviz.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..cliargs import add_graphs_arg, add_model_args, auto_precision_measured, graphs_from_args
from .sizing import choose


def register(subparsers) -> None:
    p = subparsers.add_parser("optimize-lookahead",
                              help="measure the forward cost and show the (W, N, G) that --lookahead auto picks")
    p.add_argument("--json", action="store_true", help="print curve, table and choice as one JSON object")
    p.add_argument("--refresh", action="store_true", help="re-measure instead of using the cached choice")
    p.add_argument("--top", type=int, default=15, help="rows of the table to print (text mode)")
    add_model_args(p)
    add_graphs_arg(p)
    p.set_defaults(func=cmd_optimize)


def cmd_optimize(args: argparse.Namespace) -> int:
    from ..engine.graphs import capture_wanted
    from ..engine.models import load_pair

    graphs = graphs_from_args(args)
    pair = load_pair(args.model, "self", device=args.device, dtype=auto_precision_measured(args))
    result = choose(pair, refresh=args.refresh, graphs=capture_wanted(graphs, pair.device))
    if args.json:
        print(json.dumps(result))
        return 0
    c = result["choice"]
    print("t(n) ms: " + ", ".join(f"{n}: {ms:.1f}" for n, ms in result["curve"].items()))
    print(f"{'W':>3} {'N':>3} {'G':>3} {'tokens':>7} {'ms':>8} {'E[tok]':>7} {'speedup':>8}")
    for r in result["table"][:args.top]:
        print(f"{r['window']:>3} {r['ngram']:>3} {r['guesses']:>3} {r['step_tokens']:>7} "
              f"{r['forward_ms']:>8.1f} {r['expected_tokens']:>7.3f} {r['predicted_speedup']:>8.3f}")
    print(f"choice: W={c['window']} N={c['ngram']} G={c['guesses']} (predicted {c['predicted_speedup']:.2f}x)",
          file=sys.stderr)
    return 0
