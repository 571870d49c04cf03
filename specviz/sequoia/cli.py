"""Sequoia's commands: `tree-dp`, `profile-acceptance`, `optimize-tree`.

`register(subparsers)` is called from `specviz.cli.build_parser`; shared arguments
come from `specviz.cliargs`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from ..cliargs import add_graphs_arg, add_model_args, graphs_from_args, load_pair_for
from ..errors import InvalidInput


def _acceptance_arg(text: str) -> list[float]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise InvalidInput(f"--acceptance must be a JSON list of numbers such as '[0.63, 0.11, 0.06]', "
                           f"got {text!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise InvalidInput(f"--acceptance must be a JSON list of numbers, got {text!r}")
    return [float(v) for v in value]


def cmd_tree_dp(args: argparse.Namespace) -> int:
    from .tree_dp import optimal_tree

    acceptance = _acceptance_arg(args.acceptance)
    result = optimal_tree(acceptance, args.budget, args.depth)
    if args.time:
        # The benchmark the issue asks for (not a timed test): best of a few runs.
        runs = []
        for _ in range(args.time):
            start = time.perf_counter()
            optimal_tree(acceptance, args.budget, args.depth)
            runs.append((time.perf_counter() - start) * 1000)
        print(f"tree-dp N={args.budget} D={args.depth} W={len(acceptance)}: best {min(runs):.1f} ms, "
              f"median {sorted(runs)[len(runs) // 2]:.1f} ms over {len(runs)} runs", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"best expected tokens per step with {args.budget} nodes, depth <= {args.depth}: {result.value:.4f}")
        print(f"parents (breadth first): {result.parents}")
    return 0


def acceptance_prompts(path: str | None) -> list[str]:
    """The prompts an acceptance vector is measured on: the file given, else the draft recipes'
    held-out prompts (no draft was trained on them, and they are not the bench suites)."""
    from ..engine.prompts import read_prompts

    if path:
        return [p["prompt"] for p in read_prompts(path)]
    from ..draft.data import load_prompts

    return [p["prompt"] for p in load_prompts("heldout")]


def cmd_profile_acceptance(args: argparse.Namespace) -> int:
    from ..engine.sampling import SamplingConfig
    from .measure import profile_acceptance_by_depth

    prompts = acceptance_prompts(args.prompts)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed).validated()
    pair = load_pair_for(args, ["sequoia"])
    # One level (the default, or less asked for): the star tree's vector.
    result = profile_acceptance_by_depth(pair, prompts, args.width, max(1, args.depths), sampling, steps=args.steps,
                                         max_new_tokens=args.max_new_tokens)
    # Where the vector came from travels with it: the prompts, the draft and the command that remeasures it.
    result |= {"prompts": args.prompts or "assets/prompts/distill.jsonl split heldout", "draft": pair.draft_name,
               "draft_checkpoint_step": pair.draft_checkpoint_step,
               "command": "python -m specviz " + shlex.join(sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    print(text)
    return 0


def cmd_optimize_tree(args: argparse.Namespace) -> int:
    from ..engine.sampling import SamplingConfig
    from .sizing import graphs_decided, plan_tree

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p).validated()
    for name, v in (("--max-budget", args.max_budget), ("--max-depth", args.max_depth)):
        if v is not None and v < 2 - (name == "--max-depth"):
            raise InvalidInput(f"{name} is too small: {v}")
    graphs = graphs_from_args(args)
    pair = load_pair_for(args, ["sequoia"])
    plan = plan_tree(pair, sampling, args.max_budget, args.max_depth, refresh=args.refresh,
                     graphs=graphs_decided(pair, graphs))
    if args.json:
        print(json.dumps(plan))
        return 0
    print(f"acceptance ({plan['acceptance_source']}): {plan['acceptance']}")
    print("t_target(n) ms: " + ", ".join(f"{n}: {v:.1f}" for n, v in plan["target_ms"].items()))
    print("t_draft(n) ms:  " + ", ".join(f"{n}: {v:.1f}" for n, v in plan["draft_ms"].items()))
    costs = plan.get("step_costs") or {}
    print(f"step costs beyond the forwards (ms, fitted from real steps): per level {costs.get('per_level', 0):.2f}, "
          f"per node drawn from {costs.get('per_parent', 0):.2f}, "
          f"per step {costs.get('per_step', 0):.2f}, per node {costs.get('per_node', 0):.3f}; "
          f"autoregressive per token {costs.get('ar_per_step', 0):.2f}")
    print(f"{'N':>5} {'D':>3} {'tok/step':>9} {'ms/step':>9} {'speedup':>8}")
    for row in plan["table"]:
        print(f"{row['budget']:>5} {row['depth']:>3} {row['value']:>9.3f} {row['ms_per_step']:>9.1f} "
              f"{row['predicted_speedup']:>7.2f}x")
    c = plan["choice"]
    print(f"DP choice: N={c['budget']} D={c['tree_depth']} ({c['value']:.3f} tokens/step, predicted "
          f"{c['predicted_speedup']:.2f}x over autoregressive)")
    race = plan.get("race")
    if race:
        interval = race.get("interval")
        spread = f", per prompt {interval[0]:.3f}-{interval[1]:.3f}x" if interval else ""
        print(f"raced on {race['prompts']} prompts x {race.get('rounds', 1)} rounds here: DP tree "
              f"{race['tree_tokens_per_s']:.1f} tok/s, adaptive tree {race['adaptive_tokens_per_s']:.1f} tok/s "
              f"({race['adaptive_over_tree']:.3f}x{spread}; adaptive needs {race['margin']:.2f}x)")
    print(f"auto runs: {'the adaptive tree' if plan.get('chosen') == 'adaptive' else 'the DP tree'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("tree-dp", help="Sequoia's optimal tree for an acceptance vector (no model)")
    p.add_argument("--acceptance", required=True, help="JSON list, e.g. '[0.63, 0.11, 0.06]'")
    p.add_argument("--budget", type=int, required=True, help="N: nodes including the root")
    p.add_argument("--depth", type=int, required=True, help="D: speculated levels (root not counted)")
    p.add_argument("--json", action="store_true", help="print {value, parents, table} as JSON")
    p.add_argument("--time", type=int, nargs="?", const=5, default=0, metavar="RUNS",
                   help="also time the DP (benchmark), printed to stderr")
    p.set_defaults(func=cmd_tree_dp)

    p = sub.add_parser("profile-acceptance", help="measure the acceptance vector of a target/draft pair")
    p.add_argument("--prompts", default=None,
                   help="JSONL file of {\"prompt\": ...} (default: the held-out prompts of "
                        "assets/prompts/distill.jsonl, which no draft was trained on)")
    p.add_argument("--width", type=int, default=8, help="W: children of the star tree")
    p.add_argument("--depths", type=int, default=1,
                   help="> 1: one vector per tree level, measured on a comb tree (a chain of rank-1 nodes, "
                        "each with W children)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=300, help="verification steps to count")
    p.add_argument("--max-new-tokens", type=int, default=128, help="per prompt before moving to the next")
    p.add_argument("--json", default=None, metavar="OUT", help="write the vector here too")
    add_model_args(p)
    p.set_defaults(func=cmd_profile_acceptance)

    p = sub.add_parser("optimize-tree", help="measure forward costs and choose Sequoia's tree (N, D)")
    p.add_argument("--temperature", type=float, default=0.0, help="picks the acceptance vector")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-budget", type=int, default=None)
    p.add_argument("--max-depth", type=int, default=None)
    p.add_argument("--refresh", action="store_true", help="re-measure instead of using the cache")
    p.add_argument("--json", action="store_true", help="print the curve, table and choice as JSON")
    add_model_args(p)
    add_graphs_arg(p)
    p.set_defaults(func=cmd_optimize_tree)
