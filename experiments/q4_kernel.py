"""SpecViz's own q4 kernel (`torch.ops.specviz.q4_rows`, AVX-512 VNNI) against torch's int4 kernel, in the
offline default's lean forward: agreement with fp32 and the forward's time at 1-16 rows, paired in one process.

    .venv/bin/python experiments/q4_kernel.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.engine import quant  # noqa: E402
from specviz.engine.lean import LeanLlama  # noqa: E402
from specviz.engine.models import load_pair, offline_default_gguf  # noqa: E402

TEXT = ("The committee met on Tuesday to discuss the budget for next year. After a long debate, the members "
        "agreed to increase funding for public libraries and to reduce spending on road repairs. def fib(n):\n"
        "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])")


@torch.inference_mode()
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("default", "self", dtype="q4")
    fp32 = load_pair("default", "self", dtype="fp32")
    model = pair.target
    kernels = {}
    for kernel in ("vnni", ""):
        outliers = quant.calibrate_outliers(model) if kernel else None
        layers = quant._convert(Path(offline_default_gguf()), model.config.num_hidden_layers, torch.bfloat16, kernel,
                                outliers)
        layers.attach(model)
        kernels[kernel or "int4pack"] = LeanLlama(model, 512)
    ids = pair.tokenizer(TEXT, return_tensors="pt").input_ids
    n = ids.shape[1]
    want = LeanLlama(fp32.target, 512)(ids, 0, rows=n).float()
    for name, forward in kernels.items():
        got = forward(ids, 0, rows=n).float()
        agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
        err = (got - want).abs().mean().item()
        print(f"{name:9s} prefill top-1 vs fp32 {agree:.4f} over {n} positions, mean |logit error| {err:.3f}")
    # Row by row: each position decoded as one row over the cache the previous rows wrote.
    for name, forward in kernels.items():
        got = torch.cat([forward(ids[:, i:i + 1], i, rows=1).float().reshape(1, -1) for i in range(n)])
        agree = (got.argmax(-1) == want.reshape(n, -1).argmax(-1)).float().mean().item()
        print(f"{name:9s} row by row top-1 vs fp32 {agree:.4f}")
    for rows in (1, 2, 4, 8, 16):
        times = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, forward in kernels.items():
                t = time.perf_counter()
                forward(ids[:, :rows], 150, rows=rows)
                times[name].append(time.perf_counter() - t)
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        print(f"rows {rows:2d}: " + "  ".join(f"{k} {v:.2f} ms" for k, v in med.items())
              + f"  int4pack/vnni {med['int4pack'] / med['vnni']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
