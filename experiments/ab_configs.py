"""Measured Sequoia settings against each other in one process (the adaptive tree's budget, threshold, children a node); written up in docs/history.md.

A/B of Sequoia decoder settings in one process: the same prompts, settings rotated per prompt.

Where `ab_revisions.py` compares two versions of the code, this compares settings of one
(an adaptive tree's budget, a threshold, a fixed tree), each run on every prompt in turn,
the order rotated per prompt and per round so that a slow spell of this shared machine
falls on all alike. Sampled rounds use different seeds (a sampled text parts between
settings, so one seed per prompt is a small sample). Reports median tokens/s, tokens per
step, nodes per step and the geometric mean of the paired ratios against the first setting.

    .venv/bin/python experiments/ab_configs.py --suite chat --prompts 8 \\
        '{"budget 24": {"tree": "adaptive", "tree_budget": 24}, "budget 8": {"tree": "adaptive", "tree_budget": 8}}'
    .venv/bin/python experiments/ab_configs.py --suite code --prompts 16 --temperature 0.6 --rounds 3 '{...}'
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", help='JSON: {"name": {decoder options}, ...}; the first is the baseline')
    p.add_argument("--suite", default="chat")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--skip", type=int, default=0, help="start at this prompt of the suite")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from specviz.engine.methods import make_decoder
    from specviz.engine.models import load_pair
    from specviz.engine.prompts import read_suites
    from specviz.engine.sampling import SamplingConfig

    configs = json.loads(args.configs)
    names = list(configs)
    pair = load_pair("default", None, device="cpu", dtype="bf16")
    prompts = [r["prompt"] for r in read_suites(args.suite)][args.skip:args.skip + args.prompts]

    def run(name: str, prompt: str, seed: int, tokens: int) -> dict:
        d = make_decoder("sequoia", pair, prompt, max_new_tokens=tokens,
                         sampling=SamplingConfig(args.temperature, seed=seed), **configs[name])
        t0 = time.perf_counter()
        trace = d.run()
        dt = time.perf_counter() - t0
        trees = [len(s.payload.nodes) for s in trace.steps if s.payload]
        return {"tps": len(trace.token_ids) / dt, "tok_per_step": len(trace.token_ids) / len(trace.steps),
                "nodes": statistics.mean(trees) if trees else 0.0}

    for name in names:   # warm-up: caches, plans, first-call costs
        run(name, prompts[0], 0, 24)
    results = {n: [] for n in names}
    for r in range(args.rounds):
        for i, prompt in enumerate(prompts):
            k = (i + r) % len(names)
            for name in names[k:] + names[:k]:
                results[name].append(run(name, prompt, i + 1000 * r, args.tokens))
            print(f"round {r + 1} prompt {i + 1}: " + ", ".join(f"{n} {results[n][-1]['tps']:.1f}" for n in names),
                  flush=True)
    base = results[names[0]]
    print(f"{args.suite}, {len(prompts)} prompts x {args.rounds} rounds, T={args.temperature:g}, {args.tokens} tokens")
    for name in names:
        got = results[name]
        ratio = math.exp(statistics.mean(math.log(a["tps"] / b["tps"]) for a, b in zip(got, base)))
        print(f"{name:24s} tok/s {statistics.median(x['tps'] for x in got):6.1f}  "
              f"tok/step {statistics.mean(x['tok_per_step'] for x in got):.3f}  "
              f"nodes {statistics.mean(x['nodes'] for x in got):.1f}  vs {names[0]}: {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
