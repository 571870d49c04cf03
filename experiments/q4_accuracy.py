"""How far each 4-bit forward's next-token choice is from fp32's, position by position over a text: SpecViz's
q4 (its own kernel, or torch's int4 one under SPECVIZ_NO_NATIVE=1) and llama.cpp's, which rounds the activations
to int8 in blocks as our kernel does. Teacher-forced: every forward reads the same text.

    .venv/bin/python experiments/q4_accuracy.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.engine.lean import LeanLlama  # noqa: E402
from specviz.engine.models import load_pair, offline_default_gguf  # noqa: E402
from specviz.engine.prompts import read_prompts  # noqa: E402

SUITES = Path(__file__).resolve().parents[1] / "assets" / "suites"


def divergence(exact: torch.Tensor, approx: torch.Tensor) -> torch.Tensor:
    """KL(p_fp32 || p_approx) per position: a smoother measure than top-1, which a near-tie flips."""
    p = exact.log_softmax(-1)
    return (p.exp() * (p - approx.log_softmax(-1))).sum(-1)


@torch.inference_mode()
def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import llama_cpp

    fp32, q4 = load_pair("default", "self", dtype="fp32"), load_pair("default", "self", dtype="q4")
    texts = [r["prompt"] if isinstance(r, dict) else getattr(r, "prompt", str(r))
             for suite in ("chat", "code", "math", "rewrite") for r in read_prompts(str(SUITES / f"{suite}.jsonl"))[:3]]
    llm = llama_cpp.Llama(model_path=str(offline_default_gguf()), n_ctx=1024, logits_all=True, verbose=False,
                          n_threads=2)
    agree = {"specviz q4": [], "llama.cpp": []}
    kl = {"specviz q4": [], "llama.cpp": []}
    for text in texts:
        ids = fp32.tokenizer(text, return_tensors="pt").input_ids[:, :256]
        n = ids.shape[1]
        exact = LeanLlama(fp32.target, 512)(ids, 0, rows=n).float().reshape(n, -1)
        want = exact.argmax(-1)
        ours = LeanLlama(q4.target, 512)
        logits = torch.cat([ours(ids[:, i:i + 1], i, rows=1).float().reshape(1, -1) for i in range(n)])
        agree["specviz q4"] += (logits.argmax(-1) == want).tolist()
        kl["specviz q4"] += divergence(exact, logits).tolist()
        llm.reset()
        llm.eval(ids[0].tolist())
        theirs = torch.tensor(llm.scores[:n]).float()
        agree["llama.cpp"] += (theirs.argmax(-1) == want).tolist()
        kl["llama.cpp"] += divergence(exact, theirs).tolist()
    for name, hits in agree.items():
        print(f"{name:11s} top-1 agreement with fp32, row by row: {sum(hits) / len(hits):.4f} over {len(hits)} positions;"
              f" mean KL(fp32 || it) {sum(kl[name]) / len(kl[name]):.5f} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
