#!/usr/bin/env python
"""Rehearse the app's workshop presets on this machine, one race each, as the page runs them.

Each preset (`specviz.ui.content.WORKSHOP`) becomes the same `RaceRequest` the page's preset button
sets up and races in this process through `specviz.engine.race.run_race`, the code the app's worker
runs. Per method it prints what the room will see: tokens, target forwards, tokens per forward,
accepted length (tokens per decoding forward, the prompt's forward left out), where the tokens came
from (draft / bonus / n-gram), whether the greedy text is identical to autoregressive's, tokens per
second and speedup. Counts do not depend on the machine's load; tokens per second do.

    python scripts/workshop_presets.py                 # all seven presets
    python scripts/workshop_presets.py --preset 3 --preset 4 --json presets.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specviz.engine.race import PairCache, run_race  # noqa: E402
from specviz.errors import SpecVizError  # noqa: E402
from specviz.request import RaceRequest  # noqa: E402
from specviz.ui import html  # noqa: E402
from specviz.ui.api import method_result  # noqa: E402
from specviz.ui.content import WORKSHOP  # noqa: E402


def preset_request(settings: dict) -> RaceRequest:
    """The preset's race as the page starts it: its settings over the page's defaults."""
    return RaceRequest(**{k: v for k, v in settings.items() if k != "question"}).validated()


def accepted_length(run) -> float:
    """Tokens per decoding forward (bench's acc.len): the prompt's forward, one token, left out."""
    if len(run.steps) <= 1:
        return float(len(run.token_ids))
    return (len(run.token_ids) - 1) / (len(run.steps) - 1)


def preset_rows(trace) -> list[dict]:
    ar = trace.runs.get("ar")
    ar_rate = html.run_stats(ar)["tokens_per_second"] if ar is not None else 0.0
    rows = []
    for method in trace.methods:
        run, result = trace.runs[method], method_result(trace, method, ar_rate)
        sources = Counter(src for step in run.steps for src in step.token_sources)
        sizes = {k: v for k, v in (run.settings or {}).items()
                 if k in ("tree", "tree_budget", "tree_depth", "window", "ngram", "guesses") and v is not None}
        rows.append({"method": method, "tokens": result["tokens"], "target_forwards": result["target_forwards"],
                     "tokens_per_forward": result["tokens_per_forward"],
                     "accepted_length": round(accepted_length(run), 3), "sources": dict(sources),
                     "identical_to_ar": result["identical_to_ar"], "tokens_per_second": result["tokens_per_second"],
                     "speedup": result["speedup"], "sizes": sizes, "error": result["error"]})
    return rows


def print_preset(number: int, name: str, trace, rows: list[dict], seconds: float) -> None:
    print(f"\n[{number}] {name}  ({trace.dtype}, {trace.machine}; {seconds:.0f} s)")
    print(f"  {'method':10s} {'tokens':>6s} {'fwds':>5s} {'tok/fwd':>7s} {'acc.len':>7s} {'same':>5s} "
          f"{'tok/s':>6s} {'speedup':>7s}  sources, sizes")
    for r in rows:
        same = {True: "yes", False: "NO", None: "-"}[r["identical_to_ar"]]
        print(f"  {r['method']:10s} {r['tokens']:6d} {r['target_forwards']:5d} {r['tokens_per_forward']:7.2f} "
              f"{r['accepted_length']:7.2f} {same:>5s} {r['tokens_per_second']:6.1f} "
              f"{(r['speedup'] or 0):6.2f}x  {r['sources']} {r['sizes']}" + (f" ERROR {r['error']}" if r["error"] else ""))


def main(argv=None) -> int:
    names = list(WORKSHOP)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", type=int, action="append", choices=range(1, len(names) + 1),
                        help="a preset by its place in the page's list (1-%d); repeat for several; default all"
                             % len(names))
    parser.add_argument("--json", type=Path, help="write every preset's rows and texts here")
    args = parser.parse_args(argv)
    pairs, results = PairCache(), []
    for number in args.preset or range(1, len(names) + 1):
        name = names[number - 1]
        try:
            start = time.perf_counter()
            trace = run_race(preset_request(WORKSHOP[name]), pairs)
            seconds = time.perf_counter() - start
        except SpecVizError as exc:
            print(f"error: preset {number}: {exc}", file=sys.stderr)
            return 2
        rows = preset_rows(trace)
        print_preset(number, name, trace, rows, seconds)
        results.append({"preset": number, "name": name, "question": WORKSHOP[name]["question"],
                        "dtype": trace.dtype, "machine": trace.machine, "seconds": round(seconds, 1), "rows": rows,
                        "texts": {m: trace.runs[m].text for m in trace.methods}})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
