"""Fingerprint of fp32 traces (greedy and sampled; every method, both drafts, both tree kinds).

Used to check that a behaviour-preserving change moves nothing: run it before and after and compare
the printed digests. Timings and the settings a run records about its machine are left out; every
token, tree node (token, parent, probabilities, status), accepted path, window and pool is hashed.
Sizes are given explicitly so nothing depends on this machine's measured forward times.

    .venv/bin/python experiments/trace_fingerprint.py            # one digest per run, then the total
    .venv/bin/python experiments/trace_fingerprint.py --graphs on   # the same on a CPU (nothing captured)

Every method has one step program; on a GPU `--graphs on` fingerprints its captured replays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch

from specviz.engine.methods import make_decoder
from specviz.engine.models import load_pair
from specviz.engine.sampling import SamplingConfig

PROMPTS = ("Write a Python function that reverses a string.",
           "Explain why the sky is blue in two sentences.")
RUNS = (  # (draft, method, options)
    ("self", "ar", {}),
    ("feature", "sequoia", {"tree_budget": 12, "tree_depth": 4}),
    ("feature", "sequoia", {"tree": "adaptive", "tree_budget": 12, "tree_depth": 5}),
    ("independent", "sequoia", {"tree_budget": 16, "tree_depth": 5}),
    ("independent", "sequoia", {"tree": "adaptive", "tree_budget": 12, "tree_depth": 5}),
    ("self", "lookahead", {"window": 5, "ngram": 4, "guesses": 4}),
)
# `graphs`: which path ran and what capture and replays cost (GraphStats), a property of the machine
TIMING_KEYS = {"time_ms", "draft_ms", "verify_ms", "step_ms", "settings", "device", "wall_seconds",
               "tokens_per_second", "graphs"}


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in sorted(value.items()) if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def main(graphs: str = "auto") -> int:
    torch.manual_seed(0)
    total = hashlib.sha256()
    pairs = {}
    for draft, method, options in RUNS:
        if draft not in pairs:
            pairs[draft] = load_pair("default", draft, device="cpu", dtype="fp32")
        for temperature in (0.0, 0.8):
            for prompt in PROMPTS:
                sampling = SamplingConfig(temperature=temperature, seed=7).validated()
                trace = make_decoder(method, pairs[draft], prompt, sampling=sampling,
                                     max_new_tokens=40, graphs=graphs, **options).run()
                blob = json.dumps(_strip(trace.to_dict()), sort_keys=True).encode()
                digest = hashlib.sha256(blob).hexdigest()[:16]
                total.update(blob)
                print(f"{digest}  {draft:11s} {method:9s} T={temperature} {json.dumps(options)} "
                      f"{prompt[:24]!r} {len(trace.token_ids)} tokens", flush=True)
    print(f"total {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", choices=("auto", "on", "off"), default="auto",
                        help="the decoders' graphs setting (default auto: the eager step on a CPU)")
    sys.exit(main(parser.parse_args().graphs))
