"""Soak test (not in CI): many consecutive races through the real app; resident memory must not grow.

Launches the app in this process on 127.0.0.1, drives it with gradio_client like a
visitor would, and reads this process's resident memory (VmRSS) after the first
10 runs (warm: models loaded, caches filled) and at the end. Target: under 5 % growth.

    .venv/bin/python scripts/soak.py                      # 200 runs, all three methods, 16 tokens, fp32
    .venv/bin/python scripts/soak.py --runs 60 --max-new-tokens 8
    .venv/bin/python scripts/soak.py --runs 30 --tracemalloc 4   # where retained memory comes from (slow)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRIM = False   # --trim: measure after malloc_trim(0)
PROMPTS = [
    "Write a Python function that reverses a string.",
    "What are three tips for giving a good talk?",
    "Repeat this list exactly three times: apple, banana, cherry, date.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
]


def trim_malloc() -> None:
    """Hand freed heap pages back to the OS (glibc), so RSS shows live memory, not allocator slack."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def rss_mb() -> float:
    gc.collect()
    if TRIM:
        trim_malloc()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Tracer:
    """--tracemalloc: what the Python heap keeps across runs, to tell a leak from native/allocator growth.

    Tracing starts at the baseline, so every traced block still alive at a later reading
    was allocated after warm-up and never freed; object counts by type come with it.
    (RSS that grows while the traced total does not is native: torch, glibc arenas.)
    """

    def __init__(self, frames: int, top: int):
        import tracemalloc

        self.tm, self.top = tracemalloc, top
        self.counts = self.type_counts()
        tracemalloc.start(frames)

    @staticmethod
    def type_counts():
        from collections import Counter

        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.get_objects())

    def report(self, runs: int) -> None:
        gc.collect()
        snap = self.tm.take_snapshot().filter_traces([
            self.tm.Filter(False, self.tm.__file__), self.tm.Filter(False, __file__)])
        traced, _ = self.tm.get_traced_memory()
        print(f"  tracemalloc after {runs} runs: {traced / 2**20:.2f} MB allocated since the baseline still alive",
              flush=True)
        for stat in snap.statistics("traceback")[:self.top]:
            print(f"  {stat.size / 1024:9.1f} KiB {stat.count:7d} blocks")
            for line in stat.traceback.format(limit=self.top)[-12:]:
                print("      " + line)
        counts = self.type_counts()
        grown = (counts - self.counts).most_common(self.top)
        print("  objects grown since the baseline (type: +count): "
              + ", ".join(f"{name}: +{n}" for name, n in grown), flush=True)


def session_entries(demo) -> int:
    """Entries in the app's per-session configs (Gradio's SessionState): must stay flat across runs."""
    holder = getattr(demo, "state_holder", None)
    sessions = list(holder.session_data.values()) if holder is not None else []
    return sum(len(s.config_values) + len(s.blocks_config.blocks) for s in sessions)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10, help="runs before the baseline memory reading")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--methods", default="ar,sequoia,lookahead")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--trim", action="store_true",
                   help="call glibc malloc_trim(0) before each reading (separates leaks from allocator slack)")
    p.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                   help="trace Python allocations from the baseline on (FRAMES deep) and print the largest "
                        "retained sites and the object types that grew at every reading (runs are many "
                        "times slower, and RSS then includes tracemalloc's own bookkeeping)")
    p.add_argument("--top", type=int, default=8, help="how many sites/types --tracemalloc prints")
    args = p.parse_args()
    global TRIM
    TRIM = args.trim
    if args.runs <= args.warmup:
        p.error("--runs must exceed --warmup")

    import gradio_client

    from specviz.ui import build_demo
    from specviz.ui.layout import DEFAULT_PRESET, METHOD_NAMES

    demo = build_demo()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    baseline = tracer = None
    began = time.monotonic()
    try:
        for i in range(args.runs):
            client.predict(prompt=PROMPTS[i % len(PROMPTS)], methods=[METHOD_NAMES.get(m, m) for m in methods], model=DEFAULT_PRESET, custom_target="",
                           custom_draft="", dtype=args.dtype, max_new_tokens=args.max_new_tokens, temperature=0.0 if i % 2 else 0.7,
                           top_p=1.0 if i % 2 else 0.9, seed=i, tree="manual", tree_budget=8,
                           tree_depth=3, lookahead="manual", window=3, ngram=3, guesses=3, pool_from_prompt=True,
                           api_name="/race_stream")
            if i + 1 == args.warmup:
                gc.collect()
                baseline = rss_mb()
                print(f"after {i + 1} runs: RSS {baseline:.1f} MB, session state {session_entries(demo)} entries",
                      flush=True)
                if args.tracemalloc:
                    tracer = Tracer(args.tracemalloc, args.top)
            elif (i + 1) % 10 == 0 and baseline is not None:
                gc.collect()
                now = rss_mb()
                print(f"after {i + 1} runs: RSS {now:.1f} MB, growth {100.0 * (now - baseline) / baseline:+.2f}%, "
                      f"session state {session_entries(demo)} entries ({time.monotonic() - began:.0f} s)", flush=True)
                if tracer is not None:
                    tracer.report(i + 1)
        gc.collect()
        final = rss_mb()
    finally:
        demo.close()
    growth = 100.0 * (final - baseline) / baseline
    print(f"soak{' (malloc_trim)' if TRIM else ''}: {args.runs} runs ({','.join(methods)}, {args.max_new_tokens} tokens, {args.dtype}) in "
          f"{time.monotonic() - began:.0f} s; RSS {baseline:.1f} MB after {args.warmup} -> {final:.1f} MB at the "
          f"end: growth {growth:+.2f}% ({'OK' if growth < 5 else 'OVER'} the 5% target)")
    return 0 if growth < 5 else 1


if __name__ == "__main__":
    sys.exit(main())
