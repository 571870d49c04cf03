"""`bench --report DIR`: the benchmark as a Markdown table and plotly figures.

Reads the same dictionary `bench --json` writes, so a report can also be rebuilt
from a saved run: `write_report(json.loads(Path("OUT.json").read_text()), "DIR")`.
Figures are written as HTML always, and as PNG when plotly's kaleido can drive a
Chrome/Chromium (offline machines with Debian's chromium can).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from .. import glossary

SPEEDUP_FIGURE = "speedup"
SIZE_FIGURE = "tokens_per_second_vs_size"


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _graphs_cell(row: dict) -> str:
    """Which path ran, and where graphs replayed the host's share of a step outside them (the split the
    0.5 ms target in docs/graphs.md is about)."""
    share = row.get("host_ms_per_step")
    label = row.get("graphs") or "-"
    return label if share is None else f"{label}, host {share:.2f} ms/step"


# The per-suite table's columns, in the glossary's words (a test checks each is defined there).
TABLE_COLUMNS = ("suite", "method", "draft", "tokens/s (median, IQR)", "speedup (median, IQR)", "tokens per forward",
                 "accepted length", "identical to ar", "graphs", "capture", "note")
# The columns defined in the line under the table.
DEFINED_COLUMNS = ("tokens/s", "speedup", "tokens per forward", "accepted length", "identical to ar", "capture")


def columns_line(markdown: bool = True, short: bool = False) -> str:
    """The line under the table: what its measurement columns mean (specviz.glossary, docs/glossary.md)."""
    return glossary.legend(DEFINED_COLUMNS, markdown=markdown, short=short)


def markdown_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|---" * len(TABLE_COLUMNS) + "|"]
    for r in rows:
        tps = f"{r['tokens_per_second']:.1f} ({r['tokens_per_second_q1']:.1f}-{r['tokens_per_second_q3']:.1f})"
        speed = "-" if r["speedup_vs_ar"] is None else (
            f"**{r['speedup_vs_ar']:.2f}x** ({r['speedup_q1']:.2f}-{r['speedup_q3']:.2f})")
        lines.append(f"| {r['suite']} | {r['method']} | {r.get('draft') or '-'} | {tps} | {speed} "
                     f"| {r['tokens_per_forward']:.2f} | {r['accepted_length']:.2f} | {r['same_as_ar'] or '-'} "
                     f"| {_graphs_cell(r)} | {_fmt(r.get('capture_ms'), '.0f', ' ms')} | {r.get('note') or ''} |")
    return "\n".join(lines)


def speedup_matrix(rows: list[dict], methods: list[str]) -> str:
    """Median speedup over ar: one row per suite, one column per method."""
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    cell = {(r["suite"], r["method"]): r["speedup_vs_ar"] for r in rows}
    lines = ["| suite | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for suite in suites:
        lines.append(f"| {suite} | " + " | ".join(_fmt(cell.get((suite, m)), ".2f", "x") for m in methods) + " |")
    return "\n".join(lines)


def _drafts_line(run: dict) -> str:
    """Which draft each drafting method ran (older runs recorded only the command's draft)."""
    drafts = run.get("drafts")
    if drafts is None:
        return f"draft: {run.get('draft', '?')}"
    if not drafts:
        return "no method ran a draft"
    return "drafts: " + "; ".join(f"{method}: {name}" for method, name in drafts.items())


def header(run: dict) -> str:
    sampling = run.get("sampling", {})
    mode = "greedy" if not sampling.get("temperature") else (
        f"temperature {sampling['temperature']}, top-p {sampling.get('top_p', 1.0)}, "
        f"top-k {sampling.get('top_k', 0)}, seed {sampling.get('seed')}")
    peers = run.get("peer_settings", {})
    lines = [
        f"- Machine: {run.get('machine', '?')} ({run.get('device', '?')}), dtype {run.get('dtype', '?')}"
        + (f" ({run['precision_choice']})" if run.get("precision_choice") else ""),
        f"- Versions: torch {run.get('torch', '?')}, transformers {run.get('transformers', '?')}, "
        f"Python {run.get('python', '?')}",
        f"- Target: {run.get('target', '?')}; " + _drafts_line(run),
        f"- {run.get('max_new_tokens')} new tokens, {mode}; date {run.get('date', '?')}",
    ]
    if "hf-assisted" in peers:
        s = peers["hf-assisted"]
        lines.append(f"- hf-assisted: draft's generation_config num_assistant_tokens={s['num_assistant_tokens']}, "
                     f"num_assistant_tokens_schedule={s['num_assistant_tokens_schedule']}, "
                     f"assistant_confidence_threshold={s['assistant_confidence_threshold']}")
    if "hf-prompt-lookup" in peers:
        lines.append(f"- hf-prompt-lookup: prompt_lookup_num_tokens="
                     f"{peers['hf-prompt-lookup']['prompt_lookup_num_tokens']}")
    for method in ("llama-cpp", "llama-cpp-lookup"):
        if method in peers:
            s = peers[method]
            knobs = ", ".join(f"{k}={v}" for k, v in s.items() if k not in ("system_info", "llama_cpp_python"))
            lines.append(f"- {method}: llama-cpp-python {s.get('llama_cpp_python', '?')}, {knobs}; "
                         f"build: {s.get('system_info', '?')}")
    if "hf-static" in peers:
        on_cuda = str(run.get("device", "")).startswith("cuda")
        lines.append("- hf-static: generate(cache_implementation=\"static\"), "
                     + ("compiled by transformers (CUDA graphs)" if on_cuda
                        else "uncompiled: transformers compiles it only on CUDA"))
    if run.get("graphs"):
        lines.append(f"- Graphs: --graphs {run['graphs']}; tokens/s is the steady rate, graph capture "
                     "is the capture column (warm-up included), not in tokens/s")
    for method, opts in (run.get("options") or {}).items():
        given = {k: v for k, v in opts.items() if v is not None}
        lines.append(f"- {method}: {given if given else 'auto sizes'}")
    if run.get("command"):
        lines.append(f"- Command: `{run['command']}`")
    return "\n".join(lines)


# -- figures -------------------------------------------------------------------------------


def speedup_figure(rows: list[dict], methods: list[str]):
    import plotly.graph_objects as go

    suites = list(dict.fromkeys(r["suite"] for r in rows))
    fig = go.Figure()
    for method in methods:
        mine = {r["suite"]: r for r in rows if r["method"] == method and r["speedup_vs_ar"] is not None}
        if not mine:
            continue
        xs = [s for s in suites if s in mine]
        ys = [mine[s]["speedup_vs_ar"] for s in xs]
        fig.add_bar(name=method, x=xs, y=ys,
                    error_y=dict(type="data", symmetric=False,
                                 array=[mine[s]["speedup_q3"] - mine[s]["speedup_vs_ar"] for s in xs],
                                 arrayminus=[mine[s]["speedup_vs_ar"] - mine[s]["speedup_q1"] for s in xs]))
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    fig.update_layout(title="Speedup over autoregressive decoding (median over prompts, bars: IQR)",
                      barmode="group", xaxis_title="suite", yaxis_title="speedup",
                      template="plotly_white", width=1000, height=500)
    return fig


def size_figure(records: list[dict], methods: list[str]):
    """Tokens/s against how many tokens the target processes per forward (tree budget, lookahead size)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    families: dict[str, list[tuple[float, float, str]]] = {}
    for method in methods:
        recs = [r for r in records if r["method"] == method]
        if not recs:
            continue
        size = statistics.median(r["forward_size"] for r in recs)
        tps = statistics.median(r["tokens_per_second"] for r in recs)
        families.setdefault(method.partition("@")[0], []).append((size, tps, method))
    for family, points in families.items():
        points.sort()
        fig.add_scatter(name=family, x=[p[0] for p in points], y=[p[1] for p in points],
                        mode="lines+markers+text" if len(points) > 1 else "markers+text",
                        text=[p[2] for p in points], textposition="top center")
    fig.update_layout(title="Tokens/s against tokens per target forward (tree budget / lookahead size), all prompts",
                      xaxis_title="tokens the target processes per decoding forward (median)",
                      yaxis_title="tokens/s (median)", xaxis_type="log", template="plotly_white",
                      width=1000, height=500)
    return fig


def _write_pngs(figures: dict, out_dir: Path) -> tuple[list[Path], str | None]:
    """PNG copies through kaleido; returns (paths, why not) so a missing Chrome is not fatal."""
    paths = [out_dir / f"{name}.png" for name in figures]
    try:
        import plotly.io as pio

        pio.write_images(list(figures.values()), [str(p) for p in paths])
        return paths, None
    except Exception as exc:  # no kaleido, no Chrome, sandbox trouble: HTML still stands
        return [], f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def write_report(run: dict, out_dir: str | Path, png: bool = True) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    methods, rows, records = run["methods"], run["summary"], run["records"]
    figures = {SPEEDUP_FIGURE: speedup_figure(rows, methods), SIZE_FIGURE: size_figure(records, methods)}
    written = [out_dir / f"{name}.html" for name in figures]
    for fig, path in zip(figures.values(), written):
        fig.write_html(path, include_plotlyjs="cdn")
    png_paths, png_error = _write_pngs(figures, out_dir) if png else ([], "not asked for")
    written += png_paths

    suite_rows = [r for r in rows if r["suite"] != "all"]
    text = ["# SpecViz benchmark", "", header(run), "",
            "## Speedup over ar (median per prompt)", "", speedup_matrix(rows, methods), "",
            "## Per suite and method", "", markdown_table(suite_rows + [r for r in rows if r["suite"] == "all"]),
            "", columns_line() + " (tokens/s here: over the wall time of the whole call; identical to ar: "
            "prompts whose greedy output was.) All terms: docs/glossary.md.",
            "", "## Figures", ""]
    for name in figures:
        png_name = f"{name}.png"
        if (out_dir / png_name).exists() and png_paths:
            text.append(f"![{name}]({png_name})")
        text.append(f"- [{name}.html]({name}.html)")
    if png_error:
        text.append(f"\nPNG export unavailable ({png_error}); the HTML figures are complete.")
    report = out_dir / "report.md"
    report.write_text("\n".join(text) + "\n")
    return [report, *written]
