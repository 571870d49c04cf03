"""Measured transformers' forward (and the full draft head) against the lean forward: 0.88x of lean `ar`; written up in docs/history.md.

A/B in one process: transformers' forward (and the full draft head) against the lean forward.

Every variant runs each prompt in turn, so machine noise hits all of them alike; the
summary gives median tokens/s and the median per-prompt ratio to the lean `ar`.

    .venv/bin/python experiments/ab_forward.py                 # 3 code + 3 chat prompts, 128 tokens, bf16
    .venv/bin/python experiments/ab_forward.py --tokens 64 --per-suite 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.engine.methods import decoder_class, make_decoder  # noqa: E402
from specviz.engine.models import load_pair  # noqa: E402
from specviz.engine.prompts import read_prompts  # noqa: E402

SUITES = Path(__file__).resolve().parents[1] / "assets" / "suites"
TREE = {"tree_budget": 8, "tree_depth": 2}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--per-suite", type=int, default=3)
    p.add_argument("--dtype", default="bf16")
    args = p.parse_args()
    pair = load_pair("default", dtype=args.dtype)
    subset_head, full_head = pair.draft.lm_head, pair.target.lm_head
    prompts = [r for suite in ("code", "chat") for r in read_prompts(str(SUITES / f"{suite}.jsonl"))[:args.per_suite]]
    # name, method, lean forward?, draft head, options
    variants = [("ar-transformers", "ar", False, None, {}), ("ar-lean", "ar", True, None, {}),
                ("sequoia-transformers-fullhead", "sequoia", False, full_head, TREE),
                ("sequoia-lean-fullhead", "sequoia", True, full_head, TREE),
                ("sequoia-lean-subsethead", "sequoia", True, subset_head, TREE),
                ("lookahead-transformers", "lookahead", False, None, {}), ("lookahead-lean", "lookahead", True, None, {})]

    def run(variant, prompt: str, n: int) -> float:
        _, method, lean, head, options = variant
        decoder_class(method).lean = lean
        if head is not None:
            pair.draft.lm_head = head
        decoder = make_decoder(method, pair, prompt, max_new_tokens=n, **options)
        start = time.perf_counter()
        trace = decoder.run()
        return len(trace.token_ids) / (time.perf_counter() - start)

    for v in variants:   # warm-up
        run(v, "Hello there, how are you?", 8)
    results: dict[str, list[float]] = {v[0]: [] for v in variants}
    for item in prompts:
        for v in variants:
            results[v[0]].append(run(v, item["prompt"], args.tokens))
            print(f"{item['id']:10s} {v[0]:32s} {results[v[0]][-1]:6.1f} tok/s", flush=True)
    base = results["ar-lean"]
    for name, values in results.items():
        ratio = statistics.median(x / b for x, b in zip(values, base))
        print(f"{name:32s} median {statistics.median(values):6.1f} tok/s   x lean ar {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
