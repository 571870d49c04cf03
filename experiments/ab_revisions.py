"""Measured an older revision's decoders against the working tree's, paired per prompt: every paired A/B in docs/history.md.

A/B in one run: the decoders of an older revision against the working tree's.

Two worker processes, one per code version, each load the models once; the driver
sends them the same runs in turn, alternating which goes first per prompt, so that
a slow spell of this shared machine hits both alike. Reports median tokens/s, the
geometric mean of the paired per-prompt ratios (new / old), tokens per step, and how
many runs produced identical tokens.

    .venv/bin/python experiments/ab_revisions.py --old HEAD            # uncommitted work against HEAD
    .venv/bin/python experiments/ab_revisions.py --old 85fbfa8 --prompts 4
    .venv/bin/python experiments/ab_revisions.py --old HEAD~1 --old-assets   # a new draft against the one before
    .venv/bin/python experiments/ab_revisions.py --old HEAD --interleave --prompts 10   # chat and code alike
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {   # name: (method, temperature, decoder options)
    "ar": ("ar", 0.0, {}),
    "sequoia 8x2": ("sequoia", 0.0, {"tree_parents": [-1, 0, 0, 0, 0, 1, 1, 2]}),
    "sequoia 9x2 T0.6": ("sequoia", 0.6, {"tree_parents": [-1, 0, 0, 0, 0, 0, 1, 1, 2]}),
    "ar T0.6": ("ar", 0.6, {}),
    # Depth 3: the trees `auto` picked for the step-9662 feature draft (greedy, T=0.6), fixed so that two
    # drafts are compared on the same deep tree (the third level is where a draft's own features are read).
    "sequoia 12x3": ("sequoia", 0.0, {"tree_parents": [-1, 0, 0, 0, 1, 1, 2, 3, 4, 4, 5, 6]}),
    "sequoia 13x3 T0.6": ("sequoia", 0.6, {"tree_parents": [-1, 0, 0, 0, 0, 1, 1, 1, 2, 5, 5, 6, 8]}),
    # Fixed sizes: `auto`'s cached plan is keyed by the forward's kind, so two code versions could each
    # measure their own and race different windows.
    "lookahead 4x3x4": ("lookahead", 0.0, {"window": 4, "ngram": 3, "guesses": 4}),
    "lookahead auto": ("lookahead", 0.0, {}),   # each revision's own sizing from the same cached curve
    "lookahead 4x3x4 T0.6": ("lookahead", 0.6, {"window": 4, "ngram": 3, "guesses": 4}),
    "lookahead auto T0.6": ("lookahead", 0.6, {}),
    "sequoia adaptive": ("sequoia", 0.0, {"tree": "adaptive"}),
    "sequoia adaptive T0.6": ("sequoia", 0.6, {"tree": "adaptive"}),
    "sequoia adaptive=0.03": ("sequoia", 0.0, {"tree": "adaptive", "tree_threshold": 0.03}),
    # `auto`: each revision races the tree its own plan picks, measured in its own cache (`own_cache`, a copy
    # of the real one's profiles) the first time a run asks for it, before that run's clock starts.
    "sequoia auto": ("sequoia", 0.0, {}),
    "sequoia auto T0.6": ("sequoia", 0.6, {}),
    # Each step's copied length priced on the target's cached curve. Both revisions read the same one only
    # where both name it alike: 5099827 and before cached it under Lookahead's key, so copy the file to that
    # name first, or each prices on a measurement of its own (docs/history.md, 2026-12-07).
    "prompt lookup": ("prompt-lookup", 0.0, {}),
    "prompt lookup T0.6": ("prompt-lookup", 0.6, {}),
}


def worker(code_dir: str, threads: int, tokens: int, draft: str | None, interleave: bool = False,
           dtype: str = "bf16", suites: str = "chat,code") -> None:
    """Serve runs on stdin (one JSON per line) with the specviz found in code_dir."""
    sys.path.insert(0, code_dir)
    import torch

    torch.set_num_threads(threads)
    import specviz
    from specviz.engine.methods import make_decoder
    from specviz.engine.models import load_pair
    from specviz.engine.prompts import read_suites
    from specviz.engine.sampling import SamplingConfig

    if not specviz.__file__.startswith(code_dir):
        raise SystemExit(f"imported {specviz.__file__}, not the code in {code_dir}")
    pair = load_pair("default", draft, device="cpu", dtype=dtype)
    prompts = [p["prompt"] for p in read_suites(suites)]
    if interleave:   # chat, code, chat, code, ...: every suite's kind in the first N
        by_suite = [[p["prompt"] for p in read_suites(name)] for name in suites.split(",")]
        prompts = [p for round_ in zip(*by_suite) for p in round_]
    print(json.dumps({"ready": specviz.__file__}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        d = make_decoder(cmd["method"], pair, prompts[cmd["i"]], max_new_tokens=tokens,
                         sampling=SamplingConfig(cmd["T"], seed=cmd["i"]), **cmd["opts"])
        t0 = time.perf_counter()
        trace = d.run()
        dt = time.perf_counter() - t0
        n = len(trace.token_ids)
        print(json.dumps({"tps": n / dt, "tok_per_step": n / len(trace.steps), "step_s": dt / len(trace.steps),
                          "ids": trace.token_ids}), flush=True)


def export(rev: str, into: Path, with_assets: bool = False) -> Path:
    """The package as it was at `rev`. Assets are data, so by default the working tree's are linked in and
    only the code differs; `with_assets` takes `rev`'s too (its drafts and acceptance vectors), to compare drafts."""
    paths = ["specviz", "assets"] if with_assets else ["specviz"]
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], check=True, capture_output=True)
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    if not with_assets:
        (into / "assets").symlink_to(ROOT / "assets")
    return into


def own_cache(into: Path) -> Path:
    """A SpecViz cache for one revision: links to the real one's models and wheels, and a copy of its
    profiles. Two revisions write some measurements under one name (Sequoia's plan): sharing one cache,
    each re-measured its plan whenever the other had written its own (every run, untimed but slow)."""
    import os
    import shutil

    real = Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")
    into.mkdir(parents=True)
    for entry in real.iterdir() if real.is_dir() else []:
        if entry.name == "profiles":
            shutil.copytree(entry, into / "profiles")
        else:
            (into / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return into


def start(code_dir: Path, args, cache: Path) -> subprocess.Popen:
    """A worker for the code in `code_dir`; its `auto` sizes are measured (untimed) in `cache` on first use."""
    import os

    cmd = [sys.executable, __file__, "--serve", str(code_dir), "--threads", str(args.threads),
           "--tokens", str(args.tokens), "--dtype", args.dtype] + (["--draft", args.draft] if args.draft else []) + (
              ["--interleave"] if args.interleave else []) + ["--suites", args.suites]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT, env={**os.environ, "SPECVIZ_CACHE": str(cache)})
    ready = proc.stdout.readline()
    if not ready:
        raise SystemExit(f"the worker for {code_dir} did not start (run it with --serve to see why)")
    return proc


def ask(proc: subprocess.Popen, cmd: dict) -> dict:
    proc.stdin.write(json.dumps(cmd) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", default="HEAD", help="git revision to compare the working tree against")
    p.add_argument("--prompts", type=int, default=8, help="chat and code suite prompts, in order")
    p.add_argument("--interleave", action="store_true", help="alternate the suites' prompts (every kind in N)")
    p.add_argument("--suites", default="chat,code", help="the prompt suites, e.g. chat,code,math,rewrite")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "q4"),
                   help="fp32 where the CPU has no native bf16 matmul (AVX2 only: bf16 runs slowly there)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--draft", default=None, help="the offline default's draft: feature (default) or independent")
    p.add_argument("--old-assets", action="store_true",
                   help="the old revision runs with its own assets (drafts, acceptance vectors), not the working tree's")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        worker(args.serve, args.threads, args.tokens, args.draft, args.interleave, args.dtype, args.suites)
        return 0
    unknown = [name for name in args.configs.split(",") if name not in CONFIGS]
    if unknown:
        p.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    configs = {name: CONFIGS[name] for name in args.configs.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {"old": start(export(args.old, Path(tmp) / "code", args.old_assets), args, own_cache(Path(tmp) / "old")),
                 "new": start(ROOT, args, own_cache(Path(tmp) / "new"))}
        tps, steps, same = collections.defaultdict(list), collections.defaultdict(list), collections.Counter()
        step_s = collections.defaultdict(list)
        for i in range(args.prompts):
            for name, (method, temperature, opts) in configs.items():
                out = {}
                for which in (("old", "new") if i % 2 == 0 else ("new", "old")):
                    out[which] = ask(procs[which], {"method": method, "T": temperature, "i": i, "opts": opts})
                    tps[name, which].append(out[which]["tps"])
                    steps[name, which].append(out[which]["tok_per_step"])
                    step_s[name, which].append(out[which]["step_s"])
                same[name] += out["old"]["ids"] == out["new"]["ids"]
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    old = args.old + (" with its own assets" if args.old_assets else "")
    print(f"old = {old}, new = working tree; {args.prompts} prompts, {args.tokens} tokens, {args.dtype}, "
          f"{args.threads} threads")
    # Sampled runs of two versions may draw other texts (other lengths, other acceptance): their tok/s compare
    # different texts, while the time a step takes (the second ratio) compares the step itself.
    print("| run | old tok/s | new tok/s | new / old (paired) | step time old / new (paired) | tokens per step old / new "
          "| identical tokens |")
    print("|---|---|---|---|---|---|---|")
    for name in configs:
        ratio = statistics.geometric_mean([n / o for n, o in zip(tps[name, "new"], tps[name, "old"])])
        step_ratio = statistics.geometric_mean([o / n for n, o in zip(step_s[name, "new"], step_s[name, "old"])])
        print(f"| {name} | {statistics.median(tps[name, 'old']):.1f} | {statistics.median(tps[name, 'new']):.1f} | "
              f"{ratio:.3f} | {step_ratio:.3f} | {statistics.mean(steps[name, 'old']):.2f} / "
              f"{statistics.mean(steps[name, 'new']):.2f} | {same[name]}/{args.prompts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
