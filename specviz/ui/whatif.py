"""The "what if" panel: the hardware-aware optimiser's prediction for any size, next to what a run reached.

Sequoia: predicted accepted length = best(n, d) from the acceptance vector (the tree
DP), predicted step time = d draft forwards + t_target(n), predicted speedup =
accepted length x t(1) / step time (`specviz.sequoia.sizing`). Lookahead: expected
tokens E(W, N, G) and one forward over (N-1)(W+G) tokens (`specviz.lookahead.sizing`).

Inputs, best first: the plans `auto` cached for the trace's pair (`hardware.plans_for`),
else what the trace itself holds (the acceptance vector the decoder used; t(n) as the
median target-forward time per input size the run actually took). A saved profile
(a GPU's t(n), e.g. a `forward-*.json` / `sequoia-plan-*.json` from another machine's
~/.cache/specviz/profiles) replaces the target curve, so a learner sees what changes
there. Pure functions: no model, no gradio.
"""

from __future__ import annotations

import math
from functools import lru_cache

from .. import safejson
from ..request import ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE  # noqa: F401 (the panel's names for them)
from ..trace import PHASE_DRAFT, PHASE_TARGET, RaceTrace, TreePayload
from . import hardware, measured
from .figures import METHOD_COLORS
from .html import esc


def _curve(data) -> dict[int, float]:
    if not isinstance(data, dict):
        return {}
    out = {}
    for k, v in data.items():
        if isinstance(v, bool):
            continue
        try:
            n, ms = int(k), float(v)
        except (TypeError, ValueError, OverflowError):
            continue
        # A size past any forward's and a time that is no time (inf, nan) would bend every prediction.
        if 1 <= n <= 1_000_000 and 0 < ms < math.inf:
            out[n] = ms
    return dict(sorted(out.items()))


def interpolate(curve: dict[int, float], n: float) -> float:
    """t(n), linear between measured sizes and past the last one (as `lookahead.sizing.interpolate`)."""
    from ..lookahead.sizing import interpolate as _interp

    return float(_interp(curve, n))


MAX_PROFILE_BYTES = 1024 * 1024   # a profile is a few KB of {n: ms}; a larger upload is refused unread


def load_profile(path: str, max_bytes: int = MAX_PROFILE_BYTES) -> dict:
    """A saved t(n) profile -> {"target_ms": {...}, "draft_ms": {...}?, "name": str}.

    Accepts the profiler's `forward-*.json` ({"ms": ...}), a `sequoia-plan-*.json`
    ({"target_ms", "draft_ms"}), a `lookahead-auto-*.json` ({"curve"}) or a plain {n: ms}.
    Every problem is an `InvalidInput` (the upload's JSON is parsed as a trace's is: `safejson`).
    """
    from ..errors import InvalidInput

    try:
        raw = safejson.read_limited(path, max_bytes, "the profile")
    except OSError as exc:
        raise InvalidInput(f"could not read the profile: {exc}") from None
    data = safejson.load_object(raw, "the profile")
    target = _curve(data.get("target_ms") or data.get("ms") or data.get("curve") or data)
    if len(target) < 2:
        raise InvalidInput("the profile has no t(n) curve (expected 'ms', 'target_ms' or 'curve': {n: ms})")
    name = data.get("key") or data.get("device") or "uploaded profile"
    return {"target_ms": target, "draft_ms": _curve(data.get("draft_ms")),
            "name": name[:120] if isinstance(name, str) else "uploaded profile"}


def trace_curve(trace: RaceTrace | None) -> dict[int, float]:
    """t(n) as this run measured it: the mean target-forward time for each input size seen (prefills excluded),
    the mean because the run's speed is its total time: a slow forward counts as much as it cost."""
    if trace is None:
        return {}
    by_n: dict[int, list[float]] = {}
    for run in trace.runs.values():
        for rec in run.steps[1:]:   # step 0 is the prompt's prefill
            ms = rec.time_ms.get(PHASE_TARGET)
            if ms:
                by_n.setdefault(int(rec.tokens_processed), []).append(float(ms))
    return {n: sum(v) / len(v) for n, v in sorted(by_n.items())}


def _trace_draft_ms(trace: RaceTrace | None) -> float | None:
    run = trace.runs.get("sequoia") if trace else None
    per_level = []
    for rec in (run.steps if run else []):
        p = rec.payload
        if isinstance(p, TreePayload) and p.depth and rec.time_ms.get(PHASE_DRAFT):
            per_level.append(rec.time_ms[PHASE_DRAFT] / p.depth)
    return sorted(per_level)[len(per_level) // 2] if per_level else None


def _trace_acceptance(trace: RaceTrace | None) -> list[float] | None:
    """The vector the run used (its settings), else the root's accepted rank counted over its trees."""
    run = trace.runs.get("sequoia") if trace else None
    if run is None:
        return None
    acc = run.settings.get("acceptance") if isinstance(run.settings, dict) else None
    if isinstance(acc, list) and acc:
        return [float(a) for a in acc]
    counts, steps = {}, 0
    for rec in run.steps:
        p = rec.payload
        if not isinstance(p, TreePayload) or not p.nodes:
            continue
        steps += 1
        kids = sorted((n for n in p.nodes if n.parent == p.nodes[0].id), key=lambda n: n.id)
        for rank, n in enumerate(kids, 1):
            if n.status == "accepted":
                counts[rank] = counts.get(rank, 0) + 1
    if not steps or not counts:
        return None
    return [counts.get(k, 0) / steps for k in range(1, max(counts) + 1)]


def _run_curve(run_curve: dict[int, float], plan_curve: dict[int, float]) -> dict[int, float]:
    """The run's measured t(n), filled in between and beyond by the machine's profiled curve scaled to the
    run's (a busy machine slows every forward alike)."""
    if not plan_curve:
        return run_curve
    ratios = sorted(ms / interpolate(plan_curve, n) for n, ms in run_curve.items())
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return {**{n: ms * scale for n, ms in plan_curve.items()}, **run_curve}


def _run_costs(trace: RaceTrace | None) -> dict:
    """What the trace's runs measured: each method's step parts and autoregressive's (see `measured`)."""
    if trace is None:
        return {}
    parts = {m: measured.measured_parts(run) for m, run in trace.runs.items()}
    parts = {m: p for m, p in parts.items() if p is not None}
    if "ar" not in parts:
        return {}
    costs = {"parts": parts, "ar_parts": parts["ar"]}
    sq, la = trace.runs.get("sequoia"), trace.runs.get("lookahead")
    acc = measured.tree_acceptance(sq)
    if acc:
        costs.update(acceptance=acc["acceptance"], by_depth=acc["by_depth"], under_lower_ranks=acc["under_lower_ranks"],
                     acceptance_source="counted on this run's trees")
    per_level = measured.draft_ms_per_level(sq)
    if per_level:
        costs["draft_ms"] = {1: per_level, 64: per_level}
    rates = measured.lookahead_rates(la)
    if rates and rates["candidates"]:
        useful = min(int(la.settings.get("guesses") or 0), int(la.settings.get("window") or 0)) or 1
        steps = len(rates["candidates"])
        mean_copies = sum(rates["copies"]) / steps
        mean_pooled = sum(rates["candidates"]) / steps - mean_copies
        # The pool's and the copies' rates apart (`measured.lookahead_rates`), and the copies a step verified.
        costs.update(lookahead_rate=rates["pool_rates"], pool_fill=min(mean_pooled / useful, 1.0),
                     copy_rate=rates["copy_rates"], copies=mean_copies)
    return costs


def inputs(trace: RaceTrace | None, profile: dict | None = None) -> dict:
    """Everything the predictions need, and where each part came from.

    With a finished race, its own measurements come first: t(n), the draft's level cost, the other
    per-step costs, the prompt's forward and autoregressive's step (`measured`), acceptance counted on
    its trees and the rate its n-grams matched at; the plans `auto` cached fill in the rest. An
    uploaded profile replaces the target's costs, and then the run's CPU times are not mixed in."""
    plans = hardware.plans_for(trace) if trace is not None else {"sequoia": None, "lookahead": None}
    sq, la = plans.get("sequoia") or {}, plans.get("lookahead") or {}
    plan_curve = _curve(sq.get("target_ms")) or _curve(la.get("curve"))
    run = _run_costs(trace) if not profile else {}
    run_curve = trace_curve(trace) if run else {}
    if run_curve:
        target, source = _run_curve(run_curve, plan_curve), "this run's own step times"
    elif plan_curve:
        target, source = plan_curve, "this machine's measured t(n) (the plan 'auto' cached)"
    else:
        target = trace_curve(trace)
        source = "t(n) measured during this run (mean target forward per input size)" if target else ""
    draft = run.get("draft_ms") or _curve(sq.get("draft_ms"))
    if not draft:
        per_level = _trace_draft_ms(trace)
        draft = {1: per_level, 64: per_level} if per_level else {}
    acceptance = run.get("acceptance") or sq.get("acceptance") or _trace_acceptance(trace)
    by_depth = run.get("by_depth") if run.get("acceptance") else sq.get("acceptance_by_depth")
    lower = run.get("under_lower_ranks") if run.get("acceptance") else sq.get("acceptance_under_lower_ranks")
    if profile:
        target = profile["target_ms"]
        source = f"the uploaded profile ({profile.get('name', 'profile')})"
        if profile.get("draft_ms"):
            draft = profile["draft_ms"]
    if target and len(target) == 1:   # one size only: assume flat (a guess, said below)
        (n, ms), = target.items()
        target = {1: ms, max(2, n): ms}
    return {"target_ms": target, "draft_ms": draft, "acceptance": acceptance, "by_depth": by_depth,
            "under_lower_ranks": lower,
            "curve_source": source, "sequoia_plan": sq or None, "lookahead_plan": la or None,
            "lookahead_rate": run.get("lookahead_rate") or la.get("accept_rate"), "pool_fill": run.get("pool_fill"),
            "parts": run.get("parts", {}), "ar_parts": run.get("ar_parts")}


@lru_cache(maxsize=8)
def _tables(acceptance: tuple, by_depth: tuple | None, budget: int, depth: int, lower: tuple | None = None):
    from ..sequoia.tree_dp import build_tables

    def rows(frozen):
        return [list(r) for r in frozen] if frozen else None

    return build_tables(list(acceptance), budget, depth, by_depth=rows(by_depth), under_lower_ranks=rows(lower))


def _freeze(by_depth):
    return tuple(tuple(float(x) for x in row) for row in by_depth) if by_depth else None


def _speedup(inp: dict, method: str, tokens_per_step: float, target_ms: float, draft_ms: float,
             other_ms: float) -> float:
    """Predicted speedup over autoregressive: with a measured race, as its summary measures it (each
    method's prompt forward included, autoregressive's own step time), else tokens x t(1) / step ms."""
    step_ms = target_ms + draft_ms + other_ms
    own, ar = inp.get("parts", {}).get(method), inp.get("ar_parts")
    if own is None or ar is None:
        return tokens_per_step * interpolate(inp["target_ms"], 1) / step_ms if step_ms > 0 else 0.0
    predicted = measured.StepParts(tokens_per_step, target_ms, draft_ms, other_ms, own.prefill_ms,
                                   own.prefill_tokens, own.tokens)
    return measured.speedup(predicted, ar)


def _other_ms(inp: dict, method: str) -> float:
    own = inp.get("parts", {}).get(method)
    return own.other_ms if own is not None else 0.0


def sequoia_point(inp: dict, budget: int, depth: int, max_budget: int = 128, max_depth: int = 12) -> dict | None:
    """Predicted accepted length, step time (and its parts) and speedup for the best tree of `budget` nodes and
    `depth` levels."""
    from ..sequoia.tree import TreeShape

    acc, target, draft = inp.get("acceptance"), inp.get("target_ms"), inp.get("draft_ms")
    if not acc or not target or len(target) < 2:
        return None
    budget, depth = int(budget), int(min(depth, budget - 1))
    tables = _tables(tuple(float(a) for a in acc), _freeze(inp.get("by_depth")), max(max_budget, budget),
                     max(max_depth, depth), _freeze(inp.get("under_lower_ranks")))
    value = float(tables.best[depth, budget])
    if not math.isfinite(value):
        return None
    shape = TreeShape.from_parents(tables.parents(budget, depth))
    draft_ms = 0.0
    for level in range(shape.depth):
        start, end = shape.level_ranges[level]
        if draft:
            draft_ms += interpolate(draft, 1 if level == 0 else end - start) if len(draft) > 1 else next(iter(draft.values()))
    target_ms, other_ms = interpolate(target, shape.size), _other_ms(inp, "sequoia")
    return {"budget": budget, "depth": shape.depth, "tokens_per_step": value, "target_ms": target_ms,
            "draft_ms": draft_ms, "other_ms": other_ms, "step_ms": draft_ms + target_ms + other_ms,
            "speedup": _speedup(inp, "sequoia", value, target_ms, draft_ms, other_ms)}


def lookahead_point(inp: dict, window: int, ngram: int, guesses: int) -> dict | None:
    from ..lookahead.sizing import ACCEPT_RATE, COPY_ACCEPT, COPY_MATCH, COPY_ROWS, step_tokens

    target = inp.get("target_ms")
    if not target or len(target) < 2:
        return None
    rate = inp.get("lookahead_rate") or ACCEPT_RATE
    n = step_tokens(int(window), int(ngram), int(guesses))
    # The pool holds at most min(G, W) useful candidates for a key; a run says how full it kept them.
    candidates = min(int(guesses), int(window)) * (inp.get("pool_fill") or 1.0)
    # Copies (prompt lookup): the run's own rate and count where it had them, else the sizing's prior.
    copies = inp["copies"] if "copies" in inp else COPY_MATCH * COPY_ROWS
    e = measured.lookahead_expected(rate, int(ngram), candidates, inp.get("copy_rate") or COPY_ACCEPT, copies)
    n_rows = n + copies * (int(ngram) - 1)   # a copy's rows run in the steps that have one
    target_ms, other_ms = interpolate(target, max(n_rows, 1)), _other_ms(inp, "lookahead")
    return {"window": window, "ngram": ngram, "guesses": guesses, "step_tokens": n, "tokens_per_step": e,
            "target_ms": target_ms, "draft_ms": 0.0, "other_ms": other_ms, "step_ms": target_ms + other_ms,
            "speedup": _speedup(inp, "lookahead", e, target_ms, 0.0, other_ms)}


def actual(trace: RaceTrace | None) -> dict:
    """What the last run reached: tokens per target forward and speedup over autoregressive (tokens/s)."""
    out = {}
    if trace is None:
        return out
    ar = trace.runs.get("ar")
    ar_speed = ar.tokens_per_second if ar and ar.steps else 0.0
    for m in ("sequoia", "lookahead"):
        run = trace.runs.get(m)
        if run is None or not run.steps:
            continue
        steps = run.steps[1:] or run.steps   # without the prefill step
        tokens = sum(len(s.new_token_ids) for s in steps)
        out[m] = {"tokens_per_step": tokens / len(steps),
                  "nodes_per_step": sum(s.tokens_processed for s in steps) / len(steps),
                  "speedup": run.tokens_per_second / ar_speed if ar_speed > 0 else None,
                  "settings": run.settings if isinstance(run.settings, dict) else {}}
    return out


def sequoia_line(inp: dict, depth: int) -> list[tuple[float, float]]:
    """(tree budget, predicted speedup) for budgets 2..128 at `depth` levels: the panel's Sequoia curve."""
    return [(float(n), p["speedup"]) for n in range(2, 129, 2)
            if (p := sequoia_point(inp, n, min(depth, n - 1))) is not None]


def lookahead_line(inp: dict, ngram: int, guesses: int) -> list[tuple[float, float]]:
    """(W, predicted speedup) for W = 1..32 at N and G: the panel's Lookahead curve."""
    return [(float(wv), p["speedup"]) for wv in range(1, 33) if (p := lookahead_point(inp, wv, ngram, guesses))]


def sweep_figure(trace: RaceTrace | None, depth: int = 5, ngram: int = 4, guesses: int = 4,
                 profile: dict | None = None, height: int = 380):
    """The panel's two curves as one plotly figure (for notebooks): predicted speedup against the tree budget
    and against the window W, with the last run's measured speedup marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .figures import _base_layout, empty_figure

    inp = inputs(trace, profile)
    if not inp["target_ms"]:
        return empty_figure("What if", "nothing measured yet: run a race first", height)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"Sequoia: tree budget n (depth {depth})",
                                                        f"Lookahead: window W (N={ngram}, G={guesses})"])
    done = actual(trace)
    for col, (method, line, size_key) in enumerate(
            (("sequoia", sequoia_line(inp, depth), "tree_budget"),
             ("lookahead", lookahead_line(inp, ngram, guesses), "window")), start=1):
        fig.add_trace(go.Scatter(x=[x for x, _ in line], y=[y for _, y in line], mode="lines",
                                 name=f"{method}: predicted", line=dict(color=METHOD_COLORS[method], width=3)),
                      row=1, col=col)
        got = done.get(method)
        size = (got or {}).get("settings", {}).get(size_key)
        if got and got["speedup"] is not None and size:
            fig.add_trace(go.Scatter(x=[size], y=[got["speedup"]], mode="markers", name=f"{method}: last run",
                                     marker=dict(symbol="diamond", size=14, color="#111827")), row=1, col=col)
        fig.add_hline(y=1.0, line=dict(dash="dash", color="#9ca3af"), row=1, col=col)
        fig.update_yaxes(title_text="predicted speedup" if col == 1 else None, rangemode="tozero",
                         gridcolor="#eee", row=1, col=col)
    fig = _base_layout(fig, f"What if: predicted speedup over autoregressive<br><sup>costs from "
                            f"{esc(inp['curve_source'])}</sup>", height)
    # The legend under the plots: above them it would cover the two subplot titles.
    fig.update_layout(margin=dict(t=90, b=90), legend=dict(orientation="h", yanchor="top", y=-0.12, x=0.0,
                                                           xanchor="left"))
    fig.update_annotations(yshift=4)
    return fig


# ----------------------------------------------------------------------------- drawing


def _chart(title: str, x_label: str, series: list[tuple[str, str, list[tuple[float, float]], bool]],
           marks: list[tuple[str, str, float, float, str]], w: int = 520, h: int = 230) -> str:
    """Speedup against a size: lines [(label, colour, points, dashed)] and marks [(label, colour, x, y, shape)]."""
    pts = [p for _, _, s, _ in series for p in s] + [(x, y) for _, _, x, y, _ in marks]
    if not pts:
        return ""
    x_hi = max(x for x, _ in pts) or 1.0
    line_top = max([y for _, _, s, _ in series for _, y in s] or [1.0])
    # A measured point far above the predictions (e.g. a slowed-down baseline) must not flatten the
    # curves: the axis stops at 1.6x the curves' top and such a point is drawn at the edge with its value.
    y_hi = max(1.2, min(max(y for _, y in pts), line_top * 1.6) * 1.1)
    left, bottom = 44, 32

    def sx(v):
        return left + v / x_hi * (w - left - 14)

    def sy(v):
        return h - bottom - v / y_hi * (h - bottom - 14)

    parts = [f'<line x1="{left}" y1="{h - bottom}" x2="{w - 8}" y2="{h - bottom}" stroke="#9ca3af"/>',
             f'<line x1="{left}" y1="8" x2="{left}" y2="{h - bottom}" stroke="#9ca3af"/>',
             f'<line x1="{left}" y1="{sy(1):.1f}" x2="{w - 8}" y2="{sy(1):.1f}" stroke="#9ca3af" '
             f'stroke-dasharray="3 4"><title>1x = as fast as autoregressive</title></line>',
             f'<text x="{left - 4}" y="{sy(1) + 4:.1f}" text-anchor="end" font-size="12">1x</text>',
             f'<text x="{left - 4}" y="16" text-anchor="end" font-size="12">{y_hi:.2g}x</text>',
             f'<text x="{w - 8}" y="{h - 6}" text-anchor="end" font-size="12">{esc(x_label)} (to {x_hi:g})</text>',
             f'<text x="{left + 4}" y="{h - bottom + 14}" font-size="12">predicted speedup ↑</text>']
    for label, color, s, dashed in series:
        if not s:
            continue
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2.5"{dash}>'
                     f'<title>{esc(label)}</title></polyline>')
    for label, color, x, y, shape in marks:
        cx, cy = sx(x), sy(min(y, y_hi))
        if y > y_hi:
            parts.append(f'<text x="{cx + 10:.1f}" y="{cy + 14:.1f}" font-size="12">↑ {y:.2f}x</text>')
        tip = f"<title>{esc(label)}</title>"
        if shape == "diamond":
            parts.append(f'<g class="sv-whatif-actual">{tip}<rect x="{cx - 6:.1f}" y="{cy - 6:.1f}" width="12" '
                         f'height="12" transform="rotate(45 {cx:.1f} {cy:.1f})" fill="#111827"/></g>')
        elif shape == "star":
            parts.append(f'<g>{tip}<text x="{cx:.1f}" y="{cy + 7:.1f}" text-anchor="middle" font-size="20" '
                         f'fill="{color}">★</text></g>')
        else:
            parts.append(f'<g class="sv-whatif-pick">{tip}<circle cx="{cx:.1f}" cy="{cy:.1f}" r="7" fill="none" '
                         f'stroke="{color}" stroke-width="3"/></g>')
    return (f'<div style="font-weight:600;margin-top:6px">{esc(title)}</div>'
            f'<svg viewBox="0 0 {w} {h}" width="100%" style="max-width:{w}px">{"".join(parts)}</svg>')


def _fmt_point(p: dict | None, what: str) -> str:
    if not p:
        return "—"
    return (f"accepted length {p['tokens_per_step']:.2f}, step time {p['step_ms']:.0f} ms → "
            f"<b>{p['speedup']:.2f}x</b> {what}")


def panel_html(trace: RaceTrace | None, budget: int, depth: int, window: int, ngram: int, guesses: int,
               profile: dict | None = None) -> str:
    """The what-if panel: predictions at the sliders' sizes, curves, the auto choice and the last run marked."""
    inp = inputs(trace, profile)
    if not inp["target_ms"]:
        return ('<div class="sv-whatif" style="color:#6b7280">Nothing measured yet: run a race (or upload a trace '
                'or a saved profile) and the predictions appear here.</div>')
    done = actual(trace)
    legend = ('<div style="font-size:13px;color:#4b5563">○ your sliders · ★ what <b>auto</b> (fastest) chose · '
              '◆ what the last run actually reached (its accepted length: like the predictions, the prompt\'s '
              'forward and its one token are left out, so it reads a little above the summary\'s tokens per '
              'forward) · '
              'dashed line: 1x = autoregressive speed</div>')
    parts = [f'<div class="sv-whatif" style="font-size:15px"><div>Costs from {esc(inp["curve_source"])}.</div>',
             legend]
    parts.append(run_parts_html(trace))
    cols = [_sequoia_column(inp, done, budget, depth), _lookahead_column(inp, done, window, ngram, guesses)]
    cols = [col for col in cols if col]
    parts.append('<div class="sv-whatif-cols">' + "".join(cols) + "</div>")
    parts.append('<div style="font-size:13px;color:#4b5563;margin-top:4px">Lookahead\'s accepted length is a '
                 'model: each verified n-gram\'s next token is right at the rate this run\'s n-grams matched at that '
                 'position '
                 '(before a run, a prior calibrated on the offline default, see <code>lookahead/sizing.py</code>); '
                 'text that repeats itself or quotes the prompt does better. On a GPU, t(n) stays nearly flat to '
                 'n = 64 or more, so the best sizes grow: upload a profile measured there to see it.</div></div>')
    return "".join(parts)


PART_ROWS = (("accepted length", "tokens_per_step", "{:.2f}"), ("target forward", "target_ms", "{:.0f} ms"),
             ("draft", "draft_ms", "{:.0f} ms"), ("other (verify, caches, trace)", "other_ms", "{:.0f} ms"),
             ("step time", "step_ms", "{:.0f} ms"), ("prompt's forward", "prefill_ms", "{:.0f} ms"))


def run_parts_html(trace: RaceTrace | None) -> str:
    """This run, predicted beside measured, part by part: the prediction takes the run's own costs and
    predicts its accepted length, so a gap in the speedup is a gap in the acceptance model."""
    rows = []
    for method in ("sequoia", "lookahead"):
        got = measured.run_prediction(trace, method)
        if got is None:
            continue
        pred, meas = got["predicted"], got["measured"]
        cells = "".join(f'<td>{fmt.format(getattr(pred, key))}</td><td>{fmt.format(getattr(meas, key))}</td>'
                        for _, key, fmt in PART_ROWS)
        gap = (got["predicted_speedup"] / got["measured_speedup"] - 1) * 100 if got["measured_speedup"] else None
        rows.append(f'<tr class="sv-parts-{method}"><th style="color:{METHOD_COLORS[method]}">'
                    f'{method.capitalize()}</th>{cells}<td><b>{got["predicted_speedup"]:.2f}x</b></td>'
                    f'<td><b>{got["measured_speedup"]:.2f}x</b></td>'
                    f'<td>{"" if gap is None else f"{gap:+.0f}%"}</td></tr>')
    if not rows:
        return ""
    head = "".join(f'<th colspan="2">{esc(label)}</th>' for label, _, _ in PART_ROWS)
    sub = "<th>predicted</th><th>measured</th>" * (len(PART_ROWS) + 1)
    return ('<div style="font-weight:600;margin-top:6px">This run: the prediction for its own sizes, part by part, '
            'beside what it measured</div><div style="overflow-x:auto"><table class="sv-parts" '
            'style="border-collapse:collapse;font-size:13px;text-align:right"><tr><th></th>' + head +
            '<th colspan="2">speedup</th><th>gap</th></tr><tr><th></th>' + sub + '<th></th></tr>' + "".join(rows) +
            '</table></div><div style="font-size:13px;color:#4b5563">Every cost is this run\'s own mean (the '
            'machine\'s load changes them from run to run); only accepted length is predicted: Sequoia\'s from '
            'how often each level\'s k-th child was accepted on its trees (an adaptive tree: how often a child '
            'drawn with the draft\'s confidence q was), Lookahead\'s from the rate its n-grams '
            'matched at, position by position. A step\'s time is its target forward + its draft + the rest; '
            'the prompt\'s forward is '
            'counted once, as the summary counts it.</div>')


def _sequoia_column(inp: dict, done: dict, budget: int, depth: int) -> str:
    """The panel's Sequoia column: predictions at the sliders' tree, auto's, the illustrative one, the last run."""
    sq = sequoia_point(inp, budget, depth)
    if sq is None:
        return ('<div><b style="color:%s">Sequoia</b>: no acceptance vector for this pair yet (run Sequoia '
                'once).</div>' % METHOD_COLORS["sequoia"])
    line = sequoia_line(inp, depth)
    marks = [(f"your tree: {budget} nodes, depth {sq['depth']}: {sq['speedup']:.2f}x", METHOD_COLORS["sequoia"],
              float(budget), sq["speedup"], "circle")]
    auto = (inp.get("sequoia_plan") or {}).get("choice")
    auto_txt = ""
    if auto:
        ap = sequoia_point(inp, int(auto["budget"]), int(auto.get("tree_depth", auto["depth"])))
        if ap:
            marks.append((f"auto: {ap['budget']} nodes, depth {ap['depth']}: {ap['speedup']:.2f}x",
                          "#16a34a", float(ap["budget"]), ap["speedup"], "star"))
            auto_txt = (f"<li>fastest (auto): {ap['budget']} nodes, depth {ap['depth']}: "
                        f"{_fmt_point(ap, 'predicted')}</li>")
    ill = sequoia_point(inp, ILLUSTRATIVE_TREE["tree_budget"], ILLUSTRATIVE_TREE["tree_depth"])
    got = done.get("sequoia")
    got_txt = ""
    if got:
        # An adaptive run's tree changed every step: place it at its average size, not its cap.
        adaptive = got["settings"].get("tree") == "adaptive"
        n_run = got["nodes_per_step"] if adaptive else int(got["settings"].get("tree_budget") or budget)
        size = f"adaptive, {n_run:.1f} nodes on average" if adaptive else f"{n_run} nodes"
        if got["speedup"] is not None:
            marks.append((f"last run: {size}, {got['tokens_per_step']:.2f} tokens per decoding step, "
                          f"{got['speedup']:.2f}x measured", "#111827", float(n_run), got["speedup"], "diamond"))
        got_txt = (f"<li>last run ({size}): {got['tokens_per_step']:.2f} tokens per decoding step"
                   + (f", <b>{got['speedup']:.2f}x</b> measured" if got["speedup"] is not None else "") + "</li>")
    return (f'<div><b style="color:{METHOD_COLORS["sequoia"]}">Sequoia</b><ul style="margin:2px 0 0 18px;'
            f'padding:0"><li>your tree ({budget} nodes, depth {sq["depth"]}): {_fmt_point(sq, "predicted")}'
            f'</li>{auto_txt}<li>illustrative ({ILLUSTRATIVE_TREE["tree_budget"]} nodes, depth '
            f'{ILLUSTRATIVE_TREE["tree_depth"]}): {_fmt_point(ill, "predicted")}</li>{got_txt}</ul>'
            + _chart(f"Sequoia: predicted speedup against tree budget (depth {depth})", "tree budget n",
                     [("predicted speedup", METHOD_COLORS["sequoia"], line, False)], marks) + "</div>")


def _lookahead_column(inp: dict, done: dict, window: int, ngram: int, guesses: int) -> str:
    """The panel's Lookahead column ("" when nothing predicts it yet)."""
    la = lookahead_point(inp, window, ngram, guesses)
    if la is None:
        return ""
    line = lookahead_line(inp, ngram, guesses)
    marks = [(f"your W={window}, N={ngram}, G={guesses}: {la['speedup']:.2f}x", METHOD_COLORS["lookahead"],
              float(window), la["speedup"], "circle")]
    auto = (inp.get("lookahead_plan") or {}).get("choice")
    auto_txt = ""
    if auto:
        ap = lookahead_point(inp, auto["window"], auto["ngram"], auto["guesses"])
        if ap:
            marks.append((f"auto: W={ap['window']}, N={ap['ngram']}, G={ap['guesses']}: {ap['speedup']:.2f}x "
                          f"(at its own N and G)", "#16a34a", float(ap["window"]), ap["speedup"], "star"))
            auto_txt = (f"<li>fastest (auto): W={ap['window']}, N={ap['ngram']}, G={ap['guesses']}: "
                        f"{_fmt_point(ap, 'predicted')}</li>")
    ill = lookahead_point(inp, **ILLUSTRATIVE_LOOKAHEAD)
    got = done.get("lookahead")
    got_txt = ""
    if got:
        w_run = int(got["settings"].get("window") or window)
        if got["speedup"] is not None:
            marks.append((f"last run: W={w_run}, {got['tokens_per_step']:.2f} tokens per decoding step, "
                          f"{got['speedup']:.2f}x measured", "#111827", float(w_run), got["speedup"], "diamond"))
        got_txt = (f"<li>last run (W={w_run}): {got['tokens_per_step']:.2f} tokens per decoding step"
                   + (f", <b>{got['speedup']:.2f}x</b> measured" if got["speedup"] is not None else "") + "</li>")
    ill_txt = (f"<li>illustrative (W={ILLUSTRATIVE_LOOKAHEAD['window']}, N={ILLUSTRATIVE_LOOKAHEAD['ngram']}, "
               f"G={ILLUSTRATIVE_LOOKAHEAD['guesses']}): {_fmt_point(ill, 'predicted')}</li>")
    return (f'<div><b style="color:{METHOD_COLORS["lookahead"]}">Lookahead</b><ul style="margin:2px 0 0 18px;'
            f'padding:0"><li>your W={window}, N={ngram}, G={guesses} (one forward over {la["step_tokens"]} '
            f'tokens): {_fmt_point(la, "predicted")}</li>{auto_txt}{ill_txt}{got_txt}</ul>'
            + _chart(f"Lookahead: predicted speedup against W (N={ngram}, G={guesses})", "window W",
                     [("predicted speedup", METHOD_COLORS["lookahead"], line, False)], marks) + "</div>")


WHATIF_CSS = """
.sv-parts td, .sv-parts th { padding: 2px 6px; border-bottom: 1px solid #e5e7eb; }
.sv-whatif-cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 14px; }
"""
