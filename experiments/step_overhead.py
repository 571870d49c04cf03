"""Measured where each decoder's step time goes (model forwards against Python overhead); written up in docs/history.md.

Where each decoder's step time goes: inside the model forwards, and everything else (Python overhead).

Wraps every forward a decoder calls with a timer, runs one prompt per method, and
prints per step: total ms, ms inside target / draft forwards, and the rest (masks,
index tensors, sampling, verification, trace records). Single-threaded by default
so the split is not blurred by thread scheduling.

    .venv/bin/python experiments/step_overhead.py
    .venv/bin/python experiments/step_overhead.py --threads 2 --tokens 64 --prompt "Write a quicksort in Python."
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specviz.engine.methods import make_decoder  # noqa: E402
from specviz.engine.models import load_pair  # noqa: E402


class Timed:
    """Stands in for a decoder's forward object and adds up the time spent in its calls."""

    def __init__(self, inner, totals: dict, name: str):
        self._inner, self._totals, self._name = inner, totals, name

    def _timed(self, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self._totals[self._name] = self._totals.get(self._name, 0.0) + time.perf_counter() - start
        return out

    def __call__(self, *args, **kwargs):
        return self._timed(self._inner, *args, **kwargs)

    def logits(self, *args, **kwargs):
        """A feature draft's head runs apart from its layers; its time is the draft's, not overhead."""
        return self._timed(self._inner.logits, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def wrap(decoder, totals: dict) -> None:
    for attr, name in (("forward", "target"), ("target_fwd", "target")):
        if getattr(decoder, attr, None) is not None:
            setattr(decoder, attr, Timed(getattr(decoder, attr), totals, name))
    drafter = getattr(decoder, "drafter", None)   # a tree decoder drafts through its drafter's forward
    if drafter is not None:
        drafter.forward = Timed(drafter.forward, totals, "draft")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default="Write a Python function that checks whether a number is prime.")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="bf16")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("default", dtype=args.dtype)
    print(f"{'method':10s} {'steps':>5s} {'tok/step':>8s} {'ms/step':>8s} {'target':>7s} {'draft':>6s} "
          f"{'other':>6s} {'other %':>7s}")
    for method in ("ar", "sequoia", "lookahead"):
        make_decoder(method, pair, args.prompt, max_new_tokens=8).run()   # warm-up (and `auto` plans)
        decoder = make_decoder(method, pair, args.prompt, max_new_tokens=args.tokens)
        decoder.step()   # the prefill is not a decoding step
        totals: dict[str, float] = {}
        wrap(decoder, totals)
        start, steps, first = time.perf_counter(), 0, len(decoder.generated)
        while not decoder.done:
            decoder.step()
            steps += 1
        total = (time.perf_counter() - start) * 1000 / steps
        target, draft = (totals.get(k, 0.0) * 1000 / steps for k in ("target", "draft"))
        other = total - target - draft
        print(f"{method:10s} {steps:5d} {(len(decoder.generated) - first) / steps:8.2f} {total:8.1f} {target:7.1f} "
              f"{draft:6.1f} {other:6.1f} {100 * other / total:6.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
