"""Paired A/B of a whole race through the app's decoding worker: an older revision's against the working tree's.

What `ab_revisions.py` does for single decoders, for the race as the app runs it (`RaceWorker.race`: the
worker process, its event stream, the sizing it resolves): one driver process per code version, each holding
its own worker with the models loaded and its `auto` sizes measured (a warm cache), and the same race sent
to each in turn, alternating which goes first. Reports per method the median tokens/s and the geometric mean
of the paired ratios (new / old), the race's wall time (first step to end) likewise, and whether the texts
agree.

    .venv/bin/python experiments/ab_race.py --old afbe801 --races 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Write a Python function that reverses a string.", "What are some easy ways to save energy at home?",
           "Explain what a hash map is to a beginner.", "Write a short poem about the sea."]


def driver(code_dir: str, max_new: int) -> None:
    """Serve races on stdin (a prompt per line) with the specviz in code_dir; print one JSON line each."""
    sys.path.insert(0, code_dir)
    import specviz
    from specviz.runtime.worker import RaceWorker
    from specviz.request import RaceRequest

    assert specviz.__file__.startswith(code_dir), specviz.__file__
    worker = RaceWorker()
    print(json.dumps({"ready": worker.info}), flush=True)
    for line in sys.stdin:
        request = RaceRequest(prompt=line.strip(), max_new_tokens=max_new).validated()
        t0 = time.monotonic()
        started, trace = None, None
        for event in worker.race(request):
            if event[0] == "start":
                started = time.monotonic()
            elif event[0] == "end":
                trace = event[1]
            elif event[0] == "error":
                raise SystemExit(f"race failed: {event}")
        ended = time.monotonic()
        runs = {m: {"tokens_per_second": r.tokens_per_second, "token_ids": r.token_ids,
                    "sizing": (r.settings or {}).get("sizing")} for m, r in trace.runs.items()}
        print(json.dumps({"wall_s": ended - (started or t0), "setup_s": (started or t0) - t0, "runs": runs}),
              flush=True)
    worker.close()


def checkout(rev: str) -> str:
    folder = tempfile.mkdtemp(prefix=f"specviz-{rev}-")
    subprocess.run(["git", "worktree", "add", "--detach", folder, rev], cwd=ROOT, check=True, capture_output=True)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the revision to compare the working tree against")
    ap.add_argument("--races", type=int, default=6, help="races per version after the warm-up")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--driver", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        driver(args.driver, args.max_new_tokens)
        return 0
    old_dir = checkout(args.old)
    versions = {"old": old_dir, "new": str(ROOT)}
    procs = {}
    try:
        for name, code in versions.items():
            procs[name] = subprocess.Popen([sys.executable, __file__, "--old", args.old, "--driver", code,
                                            "--max-new-tokens", str(args.max_new_tokens)], cwd=code,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            print(name, procs[name].stdout.readline().strip(), flush=True)

        def race(name: str, prompt: str) -> dict:
            procs[name].stdin.write(prompt + "\n")
            procs[name].stdin.flush()
            return json.loads(procs[name].stdout.readline())

        # Warm-up: each version measures its own 'auto' sizes (its cache keys differ), one version at a time,
        # racing until it no longer runs first sizes (the new worker measures right after such a race).
        for name in versions:
            for _ in range(20):
                out = race(name, PROMPTS[0])
                if not any(r.get("sizing") == "first" for r in out["runs"].values()):
                    break
                time.sleep(30 if name == "new" else 0)
            print(f"{name}: warm", flush=True)
        results = {name: [] for name in versions}
        for i in range(args.races):
            order = list(versions) if i % 2 == 0 else list(reversed(versions))
            prompt = PROMPTS[i % len(PROMPTS)]
            for name in order:
                results[name].append(race(name, prompt))
            print(f"race {i + 1}: " + ", ".join(f"{n} {results[n][-1]['wall_s']:.2f} s" for n in order), flush=True)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(60)
        subprocess.run(["git", "worktree", "remove", "--force", old_dir], cwd=ROOT, capture_output=True)
    report(results)
    return 0


def report(results: dict) -> None:
    old, new = results["old"], results["new"]
    print("\n| what | old | new | new / old (geometric mean of pairs) |\n|---|---|---|---|")
    ratios = [n["wall_s"] / o["wall_s"] for o, n in zip(old, new)]
    print(f"| race wall time, s | {statistics.median(r['wall_s'] for r in old):.2f} | "
          f"{statistics.median(r['wall_s'] for r in new):.2f} | {statistics.geometric_mean(ratios):.3f} |")
    for m in old[0]["runs"]:
        o = [r["runs"][m]["tokens_per_second"] for r in old]
        n = [r["runs"][m]["tokens_per_second"] for r in new]
        print(f"| {m} tokens/s | {statistics.median(o):.1f} | {statistics.median(n):.1f} | "
              f"{statistics.geometric_mean(b / a for a, b in zip(o, n)):.3f} |")
    same = sum(o["runs"][m]["token_ids"] == n["runs"][m]["token_ids"] for o, n in zip(old, new) for m in o["runs"])
    print(f"\nidentical texts: {same} of {len(old) * len(old[0]['runs'])}")


if __name__ == "__main__":
    sys.exit(main())
