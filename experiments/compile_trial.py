"""Measured whether torch.compile pays for the lean forward on a CPU: 0.92x of eager, not kept; written up in docs/history.md.

Does torch.compile pay for the lean forward here? Greedy decoding, eager against compiled, interleaved.

    .venv/bin/python experiments/compile_trial.py 2      # CPU threads
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

from specviz.engine.lean import LeanLlama
from specviz.engine.models import load_pair

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
pair = load_pair("default", dtype="bf16")
model = pair.target
prompt = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28]])
def decode(fwd_fn, lean, n=64):
    lean_logits = fwd_fn(prompt, 0)
    tok = lean_logits.argmax(-1).view(1, 1)
    pos = prompt.shape[1]
    out = []
    t = time.perf_counter()
    for i in range(n):
        logits = fwd_fn(tok, pos)
        pos += 1
        tok = logits.argmax(-1).view(1, 1)
        out.append(int(tok))
    return n / (time.perf_counter() - t), out
with torch.inference_mode():
    lean = LeanLlama(model, 512)
    eager = lambda ids, start: lean.forward(ids, start)
    compiled_fn = torch.compile(lean.forward, dynamic=True)
    t = time.perf_counter()
    try:
        r = decode(compiled_fn, lean, 4)
        print(f"compile+4 tokens {time.perf_counter() - t:.1f} s")
    except Exception as exc:
        print("compile failed:", type(exc).__name__, str(exc)[:300]); raise SystemExit
    res = {"eager": [], "compiled": []}
    outs = {}
    for rep in range(3):
        for name, fn in (("eager", eager), ("compiled", compiled_fn)):
            tps, out = decode(fn, lean)
            res[name].append(tps); outs[name] = out
    for k, v in res.items(): print(k, [round(x, 1) for x in v], "median", round(statistics.median(v), 1))
    print("same tokens:", outs["eager"] == outs["compiled"])
