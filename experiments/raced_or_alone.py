"""How much a method's speed drops when it races beside others, against the same decoder run alone.

The page can only show a method at the speed its steps take inside a race, where the decoders take turns on one
machine. This runs, in one process pinned to one CPU (as the app's worker is), each prompt of the bench suites as
a race (`runtime.race.start_race`, speeds from each method's own step timers) and each method alone (wall clock),
and prints the median speedups over `ar` both ways; `--turn-ms` sets the race's turn (`runtime.race.TURN_MS`; 0:
one forward each in turn, as before 2026-12-06).

    .venv/bin/python experiments/raced_or_alone.py                 # q4, 8 prompts, 96 tokens, one thread
    .venv/bin/python experiments/raced_or_alone.py --turn-ms 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specviz.engine.methods import make_decoder
from specviz.engine.models import load_pair
from specviz.engine.prompts import read_suites
from specviz.runtime.race import TURN_MS, start_race

METHODS = ("ar", "sequoia", "lookahead")


def own_speed(run) -> float:
    """Tokens per second of a run by its own steps' timers (what the page shows)."""
    return len(run.token_ids) / (sum(sum(s.time_ms.values()) for s in run.steps) / 1000)


def alone(pair, method: str, prompt: str, tokens: int) -> float:
    decoder = make_decoder(method, pair, prompt, max_new_tokens=tokens)
    start = time.perf_counter()
    trace = decoder.run()
    seconds = time.perf_counter() - start
    decoder.close()
    return len(trace.token_ids) / seconds


def speedups(speeds: dict[str, list[float]]) -> str:
    base = speeds["ar"]
    return f"ar {statistics.median(base):.1f} tokens/s, " + ", ".join(
        f"{m} {statistics.median([s / a for s, a in zip(speeds[m], base)]):.3f}x" for m in METHODS[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="q4")
    p.add_argument("--prompts", type=int, default=2, help="per suite (chat, code, math, rewrite)")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--turn-ms", type=float, default=TURN_MS)
    args = p.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    suites = [read_suites(name)[:args.prompts] for name in ("chat", "code", "math", "rewrite")]
    prompts = [entry["prompt"] for suite in suites for entry in suite]
    pair = load_pair(dtype=args.dtype)

    def race(prompt: str):
        built = start_race(pair, prompt, list(METHODS), max_new_tokens=args.tokens)
        built.turn_ms = args.turn_ms
        return built.run()

    race(prompts[0])   # `auto` sizes measured and cached, code and data warm
    raced, solo = {m: [] for m in METHODS}, {m: [] for m in METHODS}
    for prompt in prompts:
        trace = race(prompt)
        for method in METHODS:
            raced[method].append(own_speed(trace.runs[method]))
            solo[method].append(alone(pair, method, prompt, args.tokens))
    print(f"{len(prompts)} prompts, {args.dtype}, {args.tokens} tokens, one thread, turn {args.turn_ms:g} ms")
    print("raced:", speedups(raced))
    print("alone:", speedups(solo))


if __name__ == "__main__":
    main()
