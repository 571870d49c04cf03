"""Measured whether torch.compile pays for the lean forward on a CPU: 0.92x of eager, not kept; written up in docs/history.md.

Does torch.compile pay for the lean forward here? Greedy decoding, eager against compiled, interleaved.

    .venv/bin/python experiments/compile_trial.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# A chat-wrapped prompt of the offline default's tokenizer, fixed so that runs compare alike.
PROMPT_IDS = [[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28]]


def decode(forward, prompt, n=64):
    """Greedy tokens/s of `forward` over n tokens after the prompt, and the tokens."""
    tok = forward(prompt, 0).argmax(-1).view(1, 1)
    pos = prompt.shape[1]
    out = []
    t = time.perf_counter()
    for _ in range(n):
        tok = forward(tok, pos).argmax(-1).view(1, 1)
        pos += 1
        out.append(int(tok))
    return n / (time.perf_counter() - t), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    args = p.parse_args()

    import torch

    from specviz.engine.lean import LeanLlama
    from specviz.engine.models import load_pair

    torch.set_num_threads(args.threads)
    model = load_pair("default", dtype="bf16").target
    prompt = torch.tensor(PROMPT_IDS)
    with torch.inference_mode():
        lean = LeanLlama(model, 512)
        forwards = {"eager": lean.forward, "compiled": torch.compile(lean.forward, dynamic=True)}
        t = time.perf_counter()
        decode(forwards["compiled"], prompt, 4)
        print(f"compile+4 tokens {time.perf_counter() - t:.1f} s")
        speeds = {name: [] for name in forwards}
        tokens = {}
        for _ in range(3):
            for name, forward in forwards.items():
                tps, tokens[name] = decode(forward, prompt)
                speeds[name].append(tps)
    for name, values in speeds.items():
        print(name, [round(x, 1) for x in values], "median", round(statistics.median(values), 1))
    print("same tokens:", tokens["eager"] == tokens["compiled"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
