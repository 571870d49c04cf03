"""The pieces of scripts/gpu/gpu_check.sh, one subcommand each; every one runs on a CPU too (`--device cpu`).

    python scripts/gpu/gpu_check.py exactness --device cuda --out DIR   # greedy == ar in fp32; bf16 agreement
    python scripts/gpu/gpu_check.py sampling  --device cuda --out DIR   # chi-square exactness on tiny models
    python scripts/gpu/gpu_check.py profile   --device cuda --out DIR   # t(n) of the target and the draft
    python scripts/gpu/gpu_check.py race      --device cuda --out DIR   # the app over HTTP with gradio_client
    python scripts/gpu/gpu_check.py graphs    --device cuda --out DIR   # fp32 exactness with graphs on, t(n)
                                                                        # replayed beside eager, a race with graphs
    python scripts/gpu/gpu_check.py graphs-table ON.json OFF.json --out FILE   # bench with --graphs on vs off
    python scripts/gpu/gpu_check.py bench-table BENCH.json --out FILE   # the GPU table of docs/benchmarks.md from a bench run

Each writes NAME.json (and a Markdown NAME.md) under --out and exits 1 when its check
fails (a decoder differing from ar in fp32, a chi-square p-value under 1e-3, a race
that errs), 0 otherwise. `--quick` shrinks every piece to a smoke run (what the CPU
tests use).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))   # helpers.py: tiny models, exact enumeration, chi-square

import torch  # noqa: E402

SUITES = "chat,code,math,rewrite"
# (label, method, options): the fixed shapes the CPU tests check, plus `auto` (sized from t(n) on this device).
CONFIGS = [
    ("sequoia 5x4", "sequoia", {"tree_budget": 5, "tree_depth": 4}),
    ("sequoia 8x4", "sequoia", {"tree_budget": 8, "tree_depth": 4}),
    ("sequoia 16x5", "sequoia", {"tree_budget": 16, "tree_depth": 5}),
    ("sequoia 32x6", "sequoia", {"tree_budget": 32, "tree_depth": 6}),
    ("sequoia auto", "sequoia", {}),
    ("lookahead 3x3x3", "lookahead", {"window": 3, "ngram": 3, "guesses": 3}),
    ("lookahead 5x4x5", "lookahead", {"window": 5, "ngram": 4, "guesses": 5}),
    ("lookahead 5x4x5 no pool", "lookahead", {"window": 5, "ngram": 4, "guesses": 5, "pool_from_prompt": False}),
    ("lookahead 7x4x7", "lookahead", {"window": 7, "ngram": 4, "guesses": 7}),
    ("lookahead auto", "lookahead", {}),
]
QUICK_CONFIGS = ["sequoia 8x4", "lookahead 3x3x3"]


def write(out: Path, name: str, data: dict, markdown: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    (out / f"{name}.md").write_text(markdown.rstrip() + "\n")
    print(markdown)


def device_of(args) -> torch.device:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: --device cuda, but torch sees no CUDA device "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    return device


def device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__} (CUDA {torch.version.cuda})"
    return f"CPU, torch {torch.__version__}, {torch.get_num_threads()} threads"


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ------------------------------------------------------------------------------------------ exactness


def pairs_to_check(device, dtype: str):
    """The offline default with its shipped draft, and with the feature draft when one is shipped."""
    from specviz.engine.models import load_pair, offline_feature_draft_dir

    pairs = [("shipped draft", load_pair("default", None, device=str(device), dtype=dtype))]
    if offline_feature_draft_dir() is not None:
        pairs.append(("feature draft", load_pair("default", "feature", device=str(device), dtype=dtype)))
    return pairs


def cmd_exactness(args) -> int:
    from specviz.engine.methods import make_decoder
    from specviz.engine.prompts import limit_per_suite, read_suites

    device = device_of(args)
    prompts = limit_per_suite(read_suites(SUITES), 1 if args.quick else args.per_suite)
    if args.quick:
        prompts = prompts[:1]
    configs = [c for c in CONFIGS if not args.quick or c[0] in QUICK_CONFIGS]
    max_new = 8 if args.quick else args.max_new_tokens
    results, failures = [], []
    for dtype in ("fp32", "bf16"):
        for pair_label, pair in pairs_to_check(device, dtype)[:1 if args.quick else None]:
            for item in prompts:
                ar = make_decoder("ar", pair, item["prompt"], max_new_tokens=max_new).run().token_ids
                for label, method, options in configs:
                    try:
                        ids = make_decoder(method, pair, item["prompt"], max_new_tokens=max_new, **options).run().token_ids
                        diff, error = first_difference(ar, ids), None
                    except Exception as exc:   # a decoder that raises is a finding, not the end of the check
                        ids, diff, error = [], 0, f"{type(exc).__name__}: {exc}"
                    row = {"dtype": dtype, "pair": pair_label, "prompt": item.get("id", item["prompt"][:30]),
                           "config": label, "tokens": len(ar), "same": diff is None and error is None,
                           "first_difference": diff, "error": error}
                    results.append(row)
                    if dtype == "fp32" and not row["same"]:
                        failures.append(row)
            del pair
            if device.type == "cuda":
                torch.cuda.empty_cache()
    lines = [f"# Greedy exactness on {device_line(device)}", "",
             f"{len(prompts)} prompts, {max_new} new tokens; fp32 must equal ar token for token, bf16 is reported.",
             "", "| dtype | pair | config | identical to ar | first difference (token index) |", "|---|---|---|---|---|"]
    for dtype in ("fp32", "bf16"):
        for pair_label in dict.fromkeys(r["pair"] for r in results):
            for label, _, _ in configs:
                rows = [r for r in results if r["dtype"] == dtype and r["pair"] == pair_label and r["config"] == label]
                if not rows:
                    continue
                diffs = [str(r["first_difference"]) for r in rows if r["first_difference"] is not None]
                errors = [r["error"] for r in rows if r["error"]]
                lines.append(f"| {dtype} | {pair_label} | {label} | {sum(r['same'] for r in rows)}/{len(rows)} | "
                             f"{', '.join(diffs) or '-'}{' ; ' + errors[0] if errors else ''} |")
    verdict = "PASS" if not failures else f"FAIL: {len(failures)} fp32 runs differ from ar"
    lines += ["", f"fp32: **{verdict}**"]
    write(Path(args.out), "exactness", {"device": device_line(device), "max_new_tokens": max_new,
                                        "results": results, "fp32_failures": failures}, "\n".join(lines))
    return 0 if not failures else 1


# ------------------------------------------------------------------------------------------ sampling


def _on(pair, device):
    """A copy of a tiny CPU pair on `device` (the exact distribution is enumerated on the CPU original)."""
    from specviz.engine.models import ModelPair

    target = copy.deepcopy(pair.target).to(device)
    draft = target if pair.draft is pair.target else copy.deepcopy(pair.draft).to(device)
    return ModelPair(target, draft, pair.tokenizer, pair.target_name, pair.draft_name, device, pair.dtype)


def cmd_sampling(args) -> int:
    from helpers import chi_square_pvalue, exact_distribution, tiny_pair

    from specviz.engine.methods import make_decoder
    from specviz.engine.sampling import SamplingConfig

    device = device_of(args)
    samples_n = 200 if args.quick else args.samples
    tree = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]            # the tree the CPU test uses: widths up to 3, depth 4
    repetitive = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]    # Lookahead's CPU test prompt
    cases = [("sequoia", tiny_pair(), [1, 2, 3], {"tree_parents": tree}, 6),
             ("lookahead", tiny_pair(draft_seed=None), repetitive, {"window": 3, "ngram": 3, "guesses": 3}, 3),
             ("ar", tiny_pair(draft_seed=None), [1, 2, 3], {}, 3)]
    # A quick run keeps T=0.6 / top-p 0.9 only: at T=1 the 216 sequences need thousands of samples before
    # any cell expects 5 (with every cell pooled, chi-square has no degrees of freedom and says nan).
    settings = [(0.6, 0.9)] if args.quick else [(1.0, 1.0), (0.6, 0.9)]
    results = []
    for method, cpu_pair, prompt_ids, options, max_new in cases:
        pair = _on(cpu_pair, device)
        for temperature, top_p in settings:
            exact = exact_distribution(cpu_pair.target, prompt_ids, SamplingConfig(temperature, top_p), n_tokens=3)
            start = time.perf_counter()
            samples = []
            for seed in range(samples_n):
                sampling = SamplingConfig(temperature, top_p, seed=seed)
                trace = make_decoder(method, pair, "", prompt_ids=prompt_ids, max_new_tokens=max_new,
                                     sampling=sampling, **options).run()
                samples.append(tuple(trace.token_ids[:3]))
            p = chi_square_pvalue(samples, exact)
            results.append({"method": method, "temperature": temperature, "top_p": top_p, "samples": samples_n,
                            "p_value": p, "passed": p > 1e-3, "seconds": round(time.perf_counter() - start, 1)})
    lines = [f"# Sampling exactness on {device_line(device)}", "",
             "First three tokens of runs on tiny random Llamas (vocabulary 6) against exact enumeration, "
             "chi-square; passes at p > 1e-3.", "",
             "| method | temperature | top-p | samples | p-value | verdict | seconds |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['method']} | {r['temperature']} | {r['top_p']} | {r['samples']} | {r['p_value']:.3g} | "
                     f"{'pass' if r['passed'] else '**FAIL**'} | {r['seconds']} |")
    write(Path(args.out), "sampling", {"device": device_line(device), "results": results}, "\n".join(lines))
    return 0 if all(r["passed"] for r in results) else 1


# ------------------------------------------------------------------------------------------ profile


def cmd_profile(args) -> int:
    from specviz.engine.models import load_pair
    from specviz.engine.profiler import default_sizes, measure_forward_times

    device = device_of(args)
    pair = load_pair("default", None, device=str(device), dtype=args.dtype)
    sizes = [1, 2, 4] if args.quick else default_sizes(device)
    repeats = 2 if args.quick else 10
    curves = {"target": measure_forward_times(pair.target, sizes, repeats=repeats)}
    if pair.draft is not pair.target:
        curves["draft"] = measure_forward_times(pair.draft, sizes, repeats=repeats)
    lines = [f"# t(n) on {device_line(device)}", "",
             f"Median ms of one forward over n new tokens after a 200-token context ({args.dtype}, "
             f"{repeats} repeats, the lean forward the decoders run, synchronised).", "",
             "| model | " + " | ".join(str(n) for n in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for name, curve in curves.items():
        lines.append(f"| {name} | " + " | ".join(f"{curve[n]:.2f}" for n in sizes) + " |")
    write(Path(args.out), "profile", {"device": device_line(device), "dtype": args.dtype, "sizes": sizes,
                                      "ms": {k: {str(n): v for n, v in c.items()} for k, c in curves.items()}},
          "\n".join(lines))
    try:   # a figure beside the table (plotly is a dependency; HTML needs no browser)
        import plotly.graph_objects as go

        fig = go.Figure([go.Scatter(x=sizes, y=[c[n] for n in sizes], name=k, mode="lines+markers")
                         for k, c in curves.items()])
        fig.update_layout(title=f"t(n), {device_line(device)}", xaxis_title="new tokens n", yaxis_title="ms",
                          xaxis_type="log")
        fig.write_html(Path(args.out) / "profile.html", include_plotlyjs="cdn")
    except Exception as exc:   # the table is what counts
        print(f"gpu_check: no t(n) figure ({exc})", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------ race


def _race(client, dtype: str, max_new: int, sizes: str, graphs: str = "auto") -> dict:
    manual = sizes == "manual"
    result = client.predict(graphs=graphs,
        prompt="Write a Python function that reverses a string.",
        methods=["Autoregressive", "Sequoia", "Lookahead"], model="SmolLM2-135M-Instruct (offline default)",
        custom_target="", custom_draft="", dtype=dtype, max_new_tokens=max_new, temperature=0.0, top_p=1.0,
        seed=0, tree=sizes, tree_budget=8 if manual else 16, tree_depth=3 if manual else 4, lookahead=sizes,
        window=3, ngram=3, guesses=3, pool_from_prompt=True, api_name="/race")
    trace_file = result["trace"]   # /race answers one JSON object; its trace is a downloaded file
    runs = json.loads(Path(trace_file).read_text(encoding="utf-8"))["runs"]
    ar = runs["ar"]["token_ids"]
    return {"dtype": dtype, "sizes": sizes, "device": runs["ar"].get("device"), "graphs": graphs,
            "graphs_words": result.get("graphs"),
            "graph_stats": {m: r.get("graphs") for m, r in runs.items()},
            "methods": {m: {"tokens": len(r["token_ids"]), "target_forwards": r["target_forwards"],
                            "tokens_per_second": round(r["tokens_per_second"], 1), "error": r["error"],
                            "same_as_ar": r["token_ids"] == ar} for m, r in runs.items()}}


def cmd_race(args) -> int:
    import gradio_client

    from helpers import served
    from specviz.ui import build_demo

    device = device_of(args)
    max_new = 8 if args.quick else 64
    races = []
    # The app as served (races in a worker process), then the way ZeroGPU runs it: in-process, the
    # race generator wrapped by a decorator (an identity here: `spaces` is not needed off ZeroGPU).
    for how, demo in (("worker process", build_demo()), ("in-process (as under ZeroGPU)", build_demo(gpu=lambda f: f))):
        with served(demo) as url:
            client = gradio_client.Client(url, verbose=False)
            for dtype, sizes in ([("fp32", "manual")] if args.quick else
                                 [("fp32", "manual"), ("bf16", "manual"), ("bf16", "auto")]):
                start = time.perf_counter()
                try:
                    race = _race(client, dtype, max_new, sizes)
                except Exception as exc:
                    race = {"dtype": dtype, "sizes": sizes, "error": f"{type(exc).__name__}: {exc}"}
                race.update(how=how, seconds=round(time.perf_counter() - start, 1))
                races.append(race)
    failed = [r for r in races if r.get("error") or any(m["error"] for m in r["methods"].values())
              or (r["dtype"] == "fp32" and not all(m["same_as_ar"] for m in r["methods"].values()))]
    lines = [f"# Races through the app on {device_line(device)}", "",
             f"gradio_client against the app on 127.0.0.1, all three methods, greedy, {max_new} tokens.", "",
             "| how | dtype | sizes | ran on | method | tokens | target forwards | tokens/s | same as ar | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in races:
        if r.get("error"):
            lines.append(f"| {r['how']} | {r['dtype']} | {r['sizes']} | - | - | - | - | - | - | {r['error']} |")
            continue
        for m, s in r["methods"].items():
            lines.append(f"| {r['how']} | {r['dtype']} | {r['sizes']} | {r['device']} | {m} | {s['tokens']} | "
                         f"{s['target_forwards']} | {s['tokens_per_second']} | {s['same_as_ar']} | {s['error'] or '-'} |")
    lines += ["", "races: **" + ("PASS" if not failed else f"FAIL ({len(failed)})") + "** (fp32 must equal ar)"]
    write(Path(args.out), "race", {"device": device_line(device), "races": races}, "\n".join(lines))
    return 0 if not failed else 1


# ------------------------------------------------------------------------------------------ bench table


def cmd_bench_table(args) -> int:
    from specviz.benchmark.report import header, speedup_matrix

    run = json.loads(Path(args.bench_json).read_text())
    rows, methods = run["summary"], run["methods"]
    tps = {(r["suite"], r["method"]): r["tokens_per_second"] for r in rows}
    lines = [f"#### On a GPU: {run.get('machine', '?')}", "", header(run), "",
             "Median speedup over `ar` per prompt:", "", speedup_matrix(rows, methods), "",
             "Tokens/s (median over all prompts): " + ", ".join(
                 f"{m} {tps[('all', m)]:.1f}" for m in methods if ("all", m) in tps) + "."]
    if ("all", "hf-static") in tps:   # the baseline a GPU user would pick: transformers' compiled static cache
        lines.append("Tokens/s over `hf-static` (all prompts): " + ", ".join(
            f"{m} {tps[('all', m)] / tps[('all', 'hf-static')]:.2f}x" for m in methods
            if ("all", m) in tps and m != "hf-static") + ".")
    same = {r["method"]: r["same_as_ar"] for r in rows if r["suite"] == "all" and r["same_as_ar"]}
    if same:
        lines.append("Greedy outputs identical to `ar` (all prompts): " +
                     ", ".join(f"{m} {v}" for m, v in same.items()) + f" ({run.get('dtype', '?')}).")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


# ------------------------------------------------------------------------------------------ graphs


def graphs_exactness(device, prompts, configs, max_new: int, quick: bool = False) -> list[dict]:
    """Every config with graphs on against `ar` with graphs off (today's eager path), greedy fp32."""
    from specviz.engine.methods import make_decoder

    rows = []
    for pair_label, pair in pairs_to_check(device, "fp32")[:1 if quick else None]:
        for item in prompts:
            ar = make_decoder("ar", pair, item["prompt"], max_new_tokens=max_new, graphs="off").run().token_ids
            for label, method, options in [("ar", "ar", {})] + configs:
                try:
                    trace = make_decoder(method, pair, item["prompt"], max_new_tokens=max_new, graphs="on",
                                         **options).run()
                    ids, stats, error = trace.token_ids, trace.graphs, None
                except Exception as exc:   # a decoder that raises is a finding, not the end of the check
                    ids, stats, error = [], None, f"{type(exc).__name__}: {exc}"
                diff = first_difference(ar, ids) if error is None else 0
                rows.append({"pair": pair_label, "prompt": item.get("id", item["prompt"][:30]), "config": label,
                             "tokens": len(ar), "same": diff is None and error is None, "first_difference": diff,
                             "error": error, "graphs": stats})
        del pair
    return rows


def graphs_curves(device, sizes: list[int], repeats: int, dtype: str) -> dict:
    """t(n) eager and through the static shapes (replays on CUDA) for the target and the draft."""
    from specviz.engine.models import load_pair
    from specviz.engine.profiler import graphs_timing, measure_forward_times

    pair = load_pair("default", None, device=str(device), dtype=dtype)
    models = {"target": pair.target} if pair.draft is pair.target else {"target": pair.target, "draft": pair.draft}
    curves = {}
    for name, model in models.items():
        curves[name] = {"eager": measure_forward_times(model, sizes, repeats=repeats),
                        "graphs": measure_forward_times(model, sizes, repeats=repeats, graphs=True),
                        "graphed": graphs_timing(model, True)}
    return curves


def graphs_markdown(device, rows: list[dict], curves: dict, sizes: list[int], races: list[dict], max_new: int,
                    dtype: str) -> str:
    failures = [r for r in rows if not r["same"]]
    lines = [f"# Graphs on {device_line(device)}", "",
             f"## fp32 exactness with graphs on ({max_new} new tokens): every config against `ar` with graphs off",
             "", "| pair | config | identical to ar | replays | shapes captured | capture ms | failed captures |",
             "|---|---|---|---|---|---|---|"]
    for pair_label in dict.fromkeys(r["pair"] for r in rows):
        for label in dict.fromkeys(r["config"] for r in rows):
            chosen = [r for r in rows if r["pair"] == pair_label and r["config"] == label]
            stats = [r["graphs"] or {} for r in chosen]
            errors = [r["error"] for r in chosen if r["error"]]
            lines.append(f"| {pair_label} | {label} | {sum(r['same'] for r in chosen)}/{len(chosen)} | "
                         f"{sum(g.get('replays', 0) for g in stats)} | {sum(g.get('shapes_captured', 0) for g in stats)} | "
                         f"{sum(g.get('capture_ms', 0.0) for g in stats):.0f} | "
                         f"{sum(len(g.get('failed') or []) for g in stats)}{' ; ' + errors[0] if errors else ''} |")
    lines += ["", "fp32 with graphs: **" + ("PASS" if not failures else f"FAIL: {len(failures)} runs differ") + "**",
              "", f"## t(n), ms: eager launches against graph replays ({dtype}, after a 200-token context)", "",
              "| model | path | " + " | ".join(str(n) for n in sizes) + " |", "|---" * (len(sizes) + 2) + "|"]
    for name, c in curves.items():
        replayed = ("eager (own forward: not graphed)" if not c["graphed"] else
                    "replayed" if device.type == "cuda" else "static shapes, eager (CPU)")
        for path, label in (("eager", "eager"), ("graphs", replayed)):
            lines.append(f"| {name} | {label} | " + " | ".join(f"{c[path][n]:.2f}" for n in sizes) + " |")
    lines += ["", "## A race through the app with graphs on", "",
              "| dtype | method | tokens | tokens/s | same as ar | graphs | error |", "|---|---|---|---|---|---|---|"]
    for r in races:
        if r.get("error"):
            lines.append(f"| {r['dtype']} | - | - | - | - | - | {r['error']} |")
            continue
        for m, s in r["methods"].items():
            g = (r.get("graph_stats") or {}).get(m) or {}
            lines.append(f"| {r['dtype']} | {m} | {s['tokens']} | {s['tokens_per_second']} | {s['same_as_ar']} | "
                         f"replays {g.get('replays', 0)}, capture {g.get('capture_ms', 0.0):.0f} ms | {s['error'] or '-'} |")
        lines.append(f"| {r['dtype']} | summary | | | | {r.get('graphs_words')} | |")
    return "\n".join(lines)


def graphs_races(device, max_new: int, quick: bool) -> list[dict]:
    import gradio_client

    from helpers import served
    from specviz.ui import build_demo

    races = []
    with served(build_demo(gpu=lambda f: f)) as url:   # in-process, as ZeroGPU and a GPU Space run it
        client = gradio_client.Client(url, verbose=False)
        for dtype in (["fp32"] if quick else ["fp32", "bf16"]):
            try:
                races.append(_race(client, dtype, max_new, "manual", graphs="on"))
            except Exception as exc:
                races.append({"dtype": dtype, "error": f"{type(exc).__name__}: {exc}"})
    return races


def cmd_graphs(args) -> int:
    from specviz.engine.profiler import default_sizes
    from specviz.engine.prompts import limit_per_suite, read_suites

    device = device_of(args)
    prompts = limit_per_suite(read_suites(SUITES), 1 if args.quick else args.per_suite)[:1 if args.quick else None]
    configs = [c for c in CONFIGS if not args.quick or c[0] in QUICK_CONFIGS]
    max_new = 8 if args.quick else args.max_new_tokens
    rows = graphs_exactness(device, prompts, configs, max_new, args.quick)
    sizes = [1, 2, 4] if args.quick else default_sizes(device)
    curves = graphs_curves(device, sizes, 2 if args.quick else 10, args.dtype)
    races = [] if args.no_race else graphs_races(device, 8 if args.quick else 64, args.quick)
    race_failed = [r for r in races if r.get("error") or any(m["error"] for m in r["methods"].values())
                   or (r["dtype"] == "fp32" and not all(m["same_as_ar"] for m in r["methods"].values()))]
    write(Path(args.out), "graphs", {"device": device_line(device), "max_new_tokens": max_new, "exactness": rows,
                                     "sizes": sizes, "curves": {k: {p: {str(n): v for n, v in c[p].items()}
                                                                    for p in ("eager", "graphs")}
                                                                for k, c in curves.items()},
                                     "races": races},
          graphs_markdown(device, rows, curves, sizes, races, max_new, args.dtype))
    return 0 if all(r["same"] for r in rows) and not race_failed else 1


def cmd_graphs_table(args) -> int:
    """The bench with --graphs on against --graphs off: steady tokens/s, capture, and the issue's ratios."""
    runs = {mode: json.loads(Path(path).read_text()) for mode, path in (("on", args.on_json), ("off", args.off_json))}
    tps = {(mode, r["method"]): r for mode, run in runs.items() for r in run["summary"] if r["suite"] == "all"}
    by_suite = {(mode, r["suite"], r["method"]): r["tokens_per_second"]
                for mode, run in runs.items() for r in run["summary"]}
    methods = runs["on"]["methods"]
    lines = [f"#### Graphs on and off: {runs['on'].get('machine', '?')}, {runs['on'].get('dtype', '?')}, "
             f"{runs['on'].get('max_new_tokens')} new tokens, --repeats {runs['on'].get('repeats')}", "",
             "| method | tokens/s graphs on (steady) | capture ms (on) | graphs (on) | tokens/s graphs off | on / off | same as ar (on) |",
             "|---|---|---|---|---|---|---|"]
    for m in methods:
        on, off = tps.get(("on", m)), tps.get(("off", m))
        if on is None or off is None:
            continue
        ratio = on["tokens_per_second"] / off["tokens_per_second"] if off["tokens_per_second"] else float("nan")
        capture = "-" if on.get("capture_ms") is None else f"{on['capture_ms']:.0f}"
        lines.append(f"| {m} | {on['tokens_per_second']:.1f} | {capture} | {on.get('graphs') or '-'} | "
                     f"{off['tokens_per_second']:.1f} | {ratio:.2f}x | {on.get('same_as_ar') or '-'} |")
    lines += ["", "Targets (issue 41), graphs on: " + ", ".join(_targets(tps, by_suite)) + "."]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


def _targets(tps: dict, by_suite: dict) -> list[str]:
    def rate(m):
        row = tps.get(("on", m))
        return row["tokens_per_second"] if row else None

    found = []
    for label, num, den, want in (("ar / hf-static", "ar", "hf-static", 1.0),
                                  ("sequoia / hf-static", "sequoia", "hf-static", 2.0),
                                  ("sequoia / ar", "sequoia", "ar", 1.8)):
        if rate(num) and rate(den):
            ratio = rate(num) / rate(den)
            found.append(f"{label} {ratio:.2f}x (>= {want}x: {'met' if ratio >= want else 'NOT met'})")
    code_l, code_ar = by_suite.get(("on", "code", "lookahead")), by_suite.get(("on", "code", "ar"))
    if code_l and code_ar:
        ratio = code_l / code_ar
        found.append(f"lookahead / ar on code {ratio:.2f}x (>= 1.3x: {'met' if ratio >= 1.3 else 'NOT met'})")
    return found or ["no pair of methods to compare"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu/gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("exactness", cmd_exactness), ("sampling", cmd_sampling), ("profile", cmd_profile),
                       ("race", cmd_race), ("graphs", cmd_graphs)):
        p = sub.add_parser(name)
        p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
        p.add_argument("--out", default="out/gpu-check")
        p.add_argument("--quick", action="store_true", help="a smoke run (what the CPU tests use)")
        p.set_defaults(func=func)
        if name in ("exactness", "graphs"):
            p.add_argument("--per-suite", type=int, default=2, help="prompts per suite")
            p.add_argument("--max-new-tokens", type=int, default=64)
        if name == "graphs":
            p.add_argument("--dtype", default="bf16", help="of the t(n) curves")
            p.add_argument("--no-race", action="store_true", help="leave out the race through the app")
        if name == "sampling":
            p.add_argument("--samples", type=int, default=3000, help="runs per method and setting")
        if name == "profile":
            p.add_argument("--dtype", default="bf16")
    p = sub.add_parser("graphs-table")
    p.add_argument("on_json")
    p.add_argument("off_json")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_graphs_table)
    p = sub.add_parser("bench-table")
    p.add_argument("bench_json")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_bench_table)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
