#!/usr/bin/env python
"""Rehearse the app's workshop presets on this machine, one race each, as the page runs them; write the figures
the workshop guide and handout quote.

Each preset (`specviz.ui.content.WORKSHOP`) becomes the same `RaceRequest` the page's preset button
sets up and races in this process through `specviz.runtime.race.run_race`, the code the app's worker
runs. Per method it prints what the room will see: tokens, target forwards, tokens per forward,
accepted length (tokens per decoding forward, the prompt's forward left out), where the tokens came
from (draft / bonus / n-gram), whether the greedy text is identical to autoregressive's, tokens per
second and speedup. Counts do not depend on the machine's load; tokens per second do.

    python scripts/workshop_presets.py                 # every preset
    python scripts/workshop_presets.py --preset 3 --preset 4 --json presets.json
    python scripts/workshop_presets.py --write docs/workshop-figures.md   # what the guide quotes (all presets)

`--write` puts every preset's figures into one generated file: a table per preset for a reader, then the same
figures as JSON, keyed "preset.method.figure" (`3.sequoia.tokens_per_forward`), with the CPU, the date, the
command and each preset's settings. The guide marks every figure it quotes with its key
(`2.53<!--fig 3.sequoia.tokens_per_forward-->`), and `tests/test_workshop.py` fails when a marked figure is not
the generated one, when a preset changed since the file was generated, or when a number in a preset's "On this
CPU" line carries no mark. After regenerating, `--requote docs/workshop.md docs/workshop-handout.md` sets every
marked figure to the new one (then read the prose around them: a number may have crossed what a sentence says).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specviz.engine.models import q4_runs_here  # noqa: E402
from specviz.runtime.race import PairCache, run_race  # noqa: E402
from specviz.errors import SpecVizError  # noqa: E402
from specviz.request import DEFAULT_PRESET, PRESETS, RaceRequest  # noqa: E402
from specviz.sequoia import whatif as sequoia_whatif  # noqa: E402
from specviz.trace import ORIGIN_COPY, TreePayload  # noqa: E402
from specviz.ui import hardware, html, measured, whatif  # noqa: E402
from specviz.ui.api import method_result  # noqa: E402
from specviz.ui.content import WORKSHOP  # noqa: E402
from specviz.ui.handlers import preset_settings  # noqa: E402

FIGURES_BEGIN = "```json"   # the generated file's machine-readable block


def page_settings(name: str) -> dict:
    """The preset's settings as the page sets them on this machine (its question and words apart)."""
    settings = preset_settings(name, DEFAULT_PRESET, list(PRESETS), q4_runs_here())
    settings.pop("question")
    return settings


def preset_request(name: str) -> RaceRequest:
    """The preset's race as the page starts it: its settings over the page's defaults."""
    settings = page_settings(name)
    settings.pop("runs")
    return RaceRequest(**settings).validated()


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


def _rounded(value, places: int = 3):
    return round(value, places) if isinstance(value, float) else value


def first_rejection(run, least_q: float = 0.3) -> dict | None:
    """The run's first sampled test that failed at a first child the draft was fairly sure of (q >= `least_q`):
    the step, the token, its q and P, the probability it was accepted with and its draw, and the step's bonus
    token (preset 4's question)."""
    for index, rec in enumerate(run.steps):
        tree = rec.payload
        if not isinstance(tree, TreePayload):
            continue
        for node in tree.nodes:
            first = node.parent >= 0 and min(n.id for n in tree.nodes if n.parent == node.parent) == node.id
            if (first and node.status == "rejected" and node.uniform is not None and node.origin != ORIGIN_COPY
                    and node.draft_prob >= least_q):
                return {"step": index, "token": node.text, "q": _rounded(node.draft_prob), "p": _rounded(node.target_prob),
                        "accept_prob": _rounded(node.accept_prob), "uniform": _rounded(node.uniform),
                        "bonus": tree.bonus_text}
    return None


def adaptive_shapes(run, steps: int = 10) -> list[dict]:
    """The first decoding steps' adaptive trees: levels, level-1 children, their q (preset 6's question)."""
    shapes = []
    for index, rec in enumerate(run.steps[1:steps + 1], start=1):
        tree = rec.payload
        if isinstance(tree, TreePayload) and len(tree.nodes) > 1:
            first = sorted((n for n in tree.nodes if n.depth == 1), key=lambda n: -n.draft_prob)
            shapes.append({"step": index, "levels": max(n.depth for n in tree.nodes), "nodes": len(tree.nodes),
                           "level1": len(first), "level1_q": [_rounded(n.draft_prob, 2) for n in first],
                           "tokens": len(rec.new_token_ids)})
    return shapes


def whatif_peak(trace, depth: int = 8) -> dict | None:
    """Where the what-if panel's predicted Sequoia speedup peaks over tree budgets on the run's own costs."""
    inp = whatif.inputs(trace)
    curve = {n: p["speedup"] for n in range(2, 129, 2) if (p := sequoia_whatif.point(inp, n, depth)) is not None}
    if not curve:
        return None
    best = max(curve, key=curve.get)
    return {"budget": best, "speedup": _rounded(curve[best])}


def preset_figures(trace, rows: list[dict]) -> dict:
    """Everything a preset's section may quote, by method and by name (see the module's doc)."""
    out = {"precision": trace.dtype}
    for row in rows:
        figures = {k: _rounded(row[k]) for k in ("tokens", "target_forwards", "tokens_per_forward", "accepted_length",
                                                 "identical_to_ar", "tokens_per_second", "speedup")}
        # Every source, 0 where none came from it (the guide may quote a none).
        figures.update({f"from_{source}": row["sources"].get(source, 0) for source in ("ar", "draft", "bonus", "ngram", "copy")})
        figures.update(row["sizes"])
        out[row["method"]] = figures
    run = trace.runs.get("sequoia")
    if run is not None:
        steps = [s for s in run.steps[1:] if s.total_ms > 0]
        out["sequoia"]["step_ms"] = _rounded(sum(s.total_ms for s in steps) / len(steps), 1) if steps else None
        acc = measured.tree_acceptance(run)
        if acc and acc.get("by_depth"):
            out["sequoia"]["first_child_by_level"] = [_rounded(level[0], 2) if level else None
                                                      for level in acc["by_depth"]]
        pays = measured.why_it_pays(trace)
        if pays:
            out["pays"] = {k: _rounded(v) for k, v in pays.items()}
        if trace.greedy is False:
            out["first_rejection"] = first_rejection(run)
        if (trace.request or {}).get("tree") == "adaptive":
            out["adaptive"] = adaptive_shapes(run)
        out["whatif_peak"] = whatif_peak(trace)
    curve = {int(n): float(ms) for n, ms in hardware.target_curve(hardware.plans_for(trace)).items()}
    if curve.get(1):   # this machine's measured t(n) (the `auto` sizing's curve), over t(1)
        out["t_over_t1"] = {str(n): _rounded(curve[n] / curve[1], 2) for n in sorted(curve) if n > 1}
    ar = trace.runs.get("ar")
    if ar is not None:
        steps = [s for s in ar.steps[1:] if s.total_ms > 0]
        out["ar"]["step_ms"] = _rounded(sum(s.total_ms for s in steps) / len(steps), 1) if steps else None
    return out


def flat_figures(tree, prefix: str = "") -> dict:
    """{"3.sequoia.tokens_per_forward": 2.53, "4.first_rejection.q": 0.66, "6.adaptive.0.levels": 6, ...}."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, list):
        items = enumerate(tree)
    else:
        return {prefix: tree}
    out = {}
    for key, value in items:
        out.update(flat_figures(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def figures_markdown(results: list[dict], header: dict) -> str:
    """The generated file: how it was made, a table per preset, then every figure as JSON."""
    lines = ["# Workshop figures (generated)", "",
             f"Generated by `{header['command']}` on {header['date']}, on {header['machine']}. Do not edit: "
             "rerun the command (the guide, [workshop.md](workshop.md), quotes these figures by key, and "
             "`tests/test_workshop.py` checks every quote against this file). Counts (tokens, forwards, tokens per "
             "forward) do not depend on the machine's load; tokens per second and speedups do.", ""]
    for result in results:
        lines += [f"## {result['preset']}. {result['name']}", "", f"Races in {result['runs']}.", "",
                  "| method | tokens | target forwards | tokens per forward | accepted length | identical to ar "
                  "| tokens/s | speedup |", "|---|---|---|---|---|---|---|---|"]
        for row in result["rows"]:
            lines.append(f"| {row['method']} | {row['tokens']} | {row['target_forwards']} | "
                         f"{row['tokens_per_forward']:.2f} | {row['accepted_length']:.2f} | {row['identical_to_ar']} | "
                         f"{row['tokens_per_second']:.1f} | {(row['speedup'] or 0):.2f}x |")
        lines.append("")
    data = {"generated": header, "presets": {str(r["preset"]): {"name": r["name"], "settings": r["settings"],
                                                                "figures": r["figures"]} for r in results}}
    lines += ["## Every figure", "", FIGURES_BEGIN, json.dumps(data, indent=1, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


def read_figures(path: Path) -> dict:
    """The generated file's JSON block (what `figures_markdown` wrote)."""
    text = path.read_text(encoding="utf-8")
    start = text.index(FIGURES_BEGIN) + len(FIGURES_BEGIN)
    return json.loads(text[start:text.index("```", start)])


def keyed_figures(data: dict) -> dict:
    """Every generated figure by the key a quote's mark names: {"3.sequoia.tokens_per_forward": 2.53, ...}."""
    return {f"{number}.{key}": value for number, preset in data["presets"].items()
            for key, value in flat_figures(preset["figures"]).items()}


MARK = re.compile(r"(-?\d+(?:\.\d+)?)((?:\*\*)?<!--fig ([\w.]+)-->)")


def requote(text: str, figures: dict) -> tuple[str, list[str]]:
    """`text` with every marked figure replaced by the generated one, at the decimals it was quoted with; and the
    marks whose key the figures lack (left as they were)."""
    missing = []

    def one(match):
        quoted, mark, key = match.groups()
        value = figures.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            missing.append(key)
            return match.group(0)
        places = len(quoted.split(".")[1]) if "." in quoted else 0
        return f"{value:.{places}f}{mark}"

    return MARK.sub(one, text), missing


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
    parser.add_argument("--write", type=Path, help="write the figures the guide quotes here (every preset)")
    parser.add_argument("--requote", type=Path, nargs="+", metavar="FILE",
                        help="with --figures: set every marked figure in these files to the generated one, and exit")
    parser.add_argument("--figures", type=Path, default=Path("docs/workshop-figures.md"),
                        help="the generated file --requote reads (default docs/workshop-figures.md)")
    args = parser.parse_args(argv)
    if args.requote:
        figures = keyed_figures(read_figures(args.figures))
        for path in args.requote:
            text, missing = requote(path.read_text(encoding="utf-8"), figures)
            path.write_text(text, encoding="utf-8")
            print(f"{path}: requoted" + (f"; no figure for {', '.join(missing)}" if missing else ""))
        return 0
    if args.write and args.preset:
        parser.error("--write generates the figures of every preset: leave out --preset")
    pairs, results, machine = PairCache(), [], ""
    for number in args.preset or range(1, len(names) + 1):
        name = names[number - 1]
        try:
            start = time.perf_counter()
            trace = run_race(preset_request(name), pairs)
            seconds = time.perf_counter() - start
        except SpecVizError as exc:
            print(f"error: preset {number}: {exc}", file=sys.stderr)
            return 2
        rows, machine = preset_rows(trace), trace.machine
        print_preset(number, name, trace, rows, seconds)
        settings = page_settings(name)
        results.append({"preset": number, "name": name, "question": WORKSHOP[name]["question"],
                        "runs": settings.pop("runs"), "settings": settings,
                        "dtype": trace.dtype, "machine": trace.machine, "seconds": round(seconds, 1), "rows": rows,
                        "figures": preset_figures(trace, rows),
                        "texts": {m: trace.runs[m].text for m in trace.methods}})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    if args.write:
        header = {"command": "python scripts/workshop_presets.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
                  "date": datetime.date.today().isoformat(), "machine": machine}
        args.write.write_text(figures_markdown(results, header), encoding="utf-8")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
