"""The "what if" panel: the hardware-aware optimiser's prediction for any size, next to what a run reached.

Each sized method draws its own column from its folder (its record's `whatif` module: Sequoia's tree DP over
budget and depth, Lookahead's E(W, N, G)); this module gathers what they price with and lays the panel out.

What they price with comes from `inputs`; a saved profile (a GPU's t(n), from another machine's
~/.cache/specviz/profiles) replaces the target curve, so a learner sees what changes there. Pure functions: no
model, no gradio.
"""

from __future__ import annotations

import math

from .. import safejson
from ..engine.curve import interpolate
from ..methods import baseline, whatifs
from ..trace import PHASE_TARGET, RaceTrace
from . import hardware, measured
from .figures import METHOD_COLORS, METHOD_LABELS
from .html import esc, run_settings, run_stats
from .svg import Frame


def curve_of(data) -> dict[int, float]:
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
    target = curve_of(data.get("target_ms") or data.get("ms") or data.get("curve") or data)
    if len(target) < 2:
        raise InvalidInput("the profile has no t(n) curve (expected 'ms', 'target_ms' or 'curve': {n: ms})")
    name = data.get("key") or data.get("device") or "uploaded profile"
    return {"target_ms": target, "draft_ms": curve_of(data.get("draft_ms")),
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


def _run_curve(run_curve: dict[int, float], plan_curve: dict[int, float]) -> dict[int, float]:
    """The run's measured t(n), filled in between and beyond by the machine's profiled curve scaled to the
    run's (a busy machine slows every forward alike)."""
    if not plan_curve:
        return run_curve
    ratios = sorted(ms / interpolate(plan_curve, n) for n, ms in run_curve.items())
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return {**{n: ms * scale for n, ms in plan_curve.items()}, **run_curve}


def _run_costs(trace: RaceTrace | None) -> dict:
    """What the trace's runs measured: each method's step parts and the baseline's (see `measured`); {} without
    the baseline's."""
    if trace is None:
        return {}
    parts = {m: measured.measured_parts(run) for m, run in trace.runs.items()}
    parts = {m: p for m, p in parts.items() if p is not None}
    if baseline() not in parts:
        return {}
    return {"parts": parts, "ar_parts": parts[baseline()]}


def inputs(trace: RaceTrace | None, profile: dict | None = None) -> dict:
    """Everything the predictions need, and where each part came from.

    With a finished race, its own measurements come first: t(n), each method's other per-step costs, the
    prompt's forward and the baseline's step (`measured`), and what each method's module counts on its run
    (a tree's acceptance and draft cost, the rate n-grams matched at); the plans `auto` cached fill in the rest,
    else what the trace holds (t(n) as the mean target forward per input size the run took). An uploaded profile
    replaces the target's costs, and then the run's CPU times are not mixed in."""
    plans = hardware.plans_for(trace)
    run = _run_costs(trace) if not profile else {}
    plan_curve = hardware.target_curve(plans)
    run_curve = trace_curve(trace) if run else {}
    if run_curve:
        target, source = _run_curve(run_curve, plan_curve), "this run's own step times"
    elif plan_curve:
        target, source = plan_curve, "this machine's measured t(n) (the plan 'auto' cached)"
    else:
        target = trace_curve(trace)
        source = "t(n) measured during this run (mean target forward per input size)" if target else ""
    if profile:
        target = profile["target_ms"]
        source = f"the uploaded profile ({profile.get('name', 'profile')})"
    if target and len(target) == 1:   # one size only: assume flat (a guess, said below)
        (n, ms), = target.items()
        target = {1: ms, max(2, n): ms}
    out = {"target_ms": target, "curve_source": source, "parts": run.get("parts", {}), "ar_parts": run.get("ar_parts")}
    for m, module in whatifs().items():
        out.update(module.inputs(trace, plans.get(m) or {}, bool(run), profile))
    return out


def speedup_over_baseline(inp: dict, method: str, tokens_per_step: float, target_ms: float, draft_ms: float,
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


def other_ms(inp: dict, method: str) -> float:
    own = inp.get("parts", {}).get(method)
    return own.other_ms if own is not None else 0.0


def actual(trace: RaceTrace | None) -> dict:
    """What the last run reached: each speculative method's accepted length (as the summary counts it), target
    forward size and speedup over the baseline (tokens/s)."""
    out = {}
    if trace is None:
        return out
    ar = trace.runs.get(baseline())
    ar_speed = ar.tokens_per_second if ar and ar.steps else 0.0
    for m, run in trace.runs.items():
        if m == baseline() or not run.steps:
            continue
        steps = run.steps[1:] or run.steps   # without the prefill step
        out[m] = {"tokens_per_step": run_stats(run)["accepted_length"],
                  "nodes_per_step": sum(s.tokens_processed for s in steps) / len(steps),
                  "speedup": run.tokens_per_second / ar_speed if ar_speed > 0 else None,
                  "settings": run_settings(run)}
    return out


def sliders() -> dict[str, tuple]:
    """Every method's what-if sliders, in the page's order: option name -> (least, most, default, label)."""
    return {name: spec for module in whatifs().values() for name, spec in module.SLIDERS.items()}


def slider_sizes(sizes: dict | None = None) -> dict:
    """The sliders' sizes by option name: what `sizes` gives, each method's defaults for the rest."""
    return {**{name: spec[2] for name, spec in sliders().items()}, **(sizes or {})}


# ----------------------------------------------------------------------------- drawing


def chart(title: str, x_label: str, series: list[tuple[str, str, list[tuple[float, float]], bool]],
           marks: list[tuple[str, str, float, float, str]], w: int = 520, h: int = 230) -> str:
    """Speedup against a size: lines [(label, colour, points, dashed)] and marks [(label, colour, x, y, shape)]."""
    pts = [p for _, _, s, _ in series for p in s] + [(x, y) for _, _, x, y, _ in marks]
    if not pts:
        return ""
    line_top = max([y for _, _, s, _ in series for _, y in s] or [1.0])
    # A measured point far above the predictions (e.g. a slowed-down baseline) must not flatten the
    # curves: the axis stops at 1.6x the curves' top and such a point is drawn at the edge with its value.
    y_hi = max(1.2, min(max(y for _, y in pts), line_top * 1.6) * 1.1)
    left, bottom = 44, 32
    frame = Frame(w, h, left, bottom, 14, [x for x, _ in pts], y_hi)
    parts = frame.axes(top=8) + [
        f'<line x1="{left}" y1="{frame.y(1):.1f}" x2="{w - 8}" y2="{frame.y(1):.1f}" stroke="#9ca3af" '
        f'stroke-dasharray="3 4"><title>1x = as fast as autoregressive</title></line>',
        f'<text x="{left - 4}" y="{frame.y(1) + 4:.1f}" text-anchor="end" font-size="12">1x</text>',
        f'<text x="{left - 4}" y="16" text-anchor="end" font-size="12">{y_hi:.2g}x</text>',
        f'<text x="{w - 8}" y="{h - 6}" text-anchor="end" font-size="12">{esc(x_label)} (to {frame.x_hi:g})</text>',
        f'<text x="{left + 4}" y="{h - bottom + 14}" font-size="12">predicted speedup ↑</text>']
    for label, color, s, dashed in series:
        if s:
            parts.append(frame.polyline(s, color, label, 2.5, dashed))
    for label, color, x, y, shape in marks:
        cx, cy = frame.x(x), frame.y(min(y, y_hi))
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


def fmt_point(p: dict | None, what: str) -> str:
    if not p:
        return "—"
    return (f"accepted length {p['tokens_per_step']:.2f}, step time {p['step_ms']:.0f} ms → "
            f"<b>{p['speedup']:.2f}x</b> {what}")


def method_column(method: str, yours: tuple[dict, str, str], auto: tuple[dict, str, str] | None,
                  illustrative: tuple[dict | None, str], last_run: tuple[dict, str, float] | None, x: str,
                  title: str, x_label: str, line: list[tuple[float, float]]) -> str:
    """One method's column of the panel in its own words: the prediction at the sliders' sizes (`yours`: the
    point, its words on the chart and in the list), auto's (the point, its sizes, a note for the chart), the
    illustrative sizes', the last run as measured (`last_run`: what `actual` found, its sizes, where the chart
    places it), and the method's curve; `x` is the point's field the chart places a prediction by."""
    colour, label = METHOD_COLORS[method], METHOD_LABELS.get(method, method)
    point, mark, words = yours
    marks = [(f"{mark}: {point['speedup']:.2f}x", colour, float(point[x]), point["speedup"], "circle")]
    auto_txt = ""
    if auto:
        ap, sizes, note = auto
        marks.append((f"auto: {sizes}: {ap['speedup']:.2f}x{note}", "#16a34a", float(ap[x]), ap["speedup"], "star"))
        auto_txt = f"<li>fastest (auto): {sizes}: {fmt_point(ap, 'predicted')}</li>"
    got_txt = ""
    if last_run:
        got, size, at = last_run
        if got["speedup"] is not None:
            marks.append((f"last run: {size}, {got['tokens_per_step']:.2f} tokens per decoding step, "
                          f"{got['speedup']:.2f}x measured", "#111827", float(at), got["speedup"], "diamond"))
        got_txt = (f"<li>last run ({size}): {got['tokens_per_step']:.2f} tokens per decoding step"
                   + (f", <b>{got['speedup']:.2f}x</b> measured" if got["speedup"] is not None else "") + "</li>")
    ill, ill_sizes = illustrative
    return (f'<div><b style="color:{colour}">{label}</b><ul style="margin:2px 0 0 18px;padding:0"><li>{words}: '
            f'{fmt_point(point, "predicted")}</li>{auto_txt}<li>illustrative ({ill_sizes}): '
            f'{fmt_point(ill, "predicted")}</li>{got_txt}</ul>'
            + chart(title, x_label, [("predicted speedup", colour, line, False)], marks) + "</div>")


def panel_html(trace: RaceTrace | None, sizes: dict | None = None, profile: dict | None = None) -> str:
    """The what-if panel: predictions at the sliders' `sizes` (by option name: tree_budget, window, ...), each
    method's curve, the auto choice and the last run marked."""
    inp, sizes = inputs(trace, profile), slider_sizes(sizes)
    if not inp["target_ms"]:
        return ('<div class="sv-whatif" style="color:#6b7280">Nothing measured yet: run a race (or upload a trace '
                'or a saved profile) and the predictions appear here.</div>')
    done = actual(trace)
    legend = ('<div style="font-size:13px;color:#4b5563">○ your sliders · ★ what <b>auto</b> (fastest) chose · '
              '◆ what the last run actually reached (its accepted length: like the predictions, the prompt\'s '
              'forward and its one token are left out, so it reads a little above the summary\'s tokens per '
              'forward) · '
              'dashed line: 1x = autoregressive speed</div>')
    cols = [col for module in whatifs().values() if (col := module.column(inp, done, sizes))]
    parts = [f'<div class="sv-whatif" style="font-size:15px"><div>Costs from {esc(inp["curve_source"])}.</div>',
             legend, run_parts_html(trace), '<div class="sv-whatif-cols">' + "".join(cols) + "</div>"]
    notes = [module.NOTE for module in whatifs().values() if getattr(module, "NOTE", "")]
    parts.append('<div style="font-size:13px;color:#4b5563;margin-top:4px">' + " ".join(notes) + (
        ' On a GPU, t(n) stays nearly flat to n = 64 or more, so the best sizes grow: upload a profile measured '
        'there to see it.</div></div>'))
    return "".join(parts)


PART_ROWS = (("accepted length", "tokens_per_step", "{:.2f}"), ("target forward", "target_ms", "{:.0f} ms"),
             ("draft", "draft_ms", "{:.0f} ms"), ("other (verify, caches, trace)", "other_ms", "{:.0f} ms"),
             ("step time", "step_ms", "{:.0f} ms"), ("prompt's forward", "prefill_ms", "{:.0f} ms"))


def run_parts_html(trace: RaceTrace | None) -> str:
    """This run, predicted beside measured, part by part: the prediction takes the run's own costs and
    predicts its accepted length, so a gap in the speedup is a gap in the acceptance model."""
    rows = []
    for method in (trace.methods if trace else ()):
        got = measured.run_prediction(trace, method)
        if got is None:
            continue
        pred, meas = got["predicted"], got["measured"]
        cells = "".join(f'<td>{fmt.format(getattr(pred, key))}</td><td>{fmt.format(getattr(meas, key))}</td>'
                        for _, key, fmt in PART_ROWS)
        gap = (got["predicted_speedup"] / got["measured_speedup"] - 1) * 100 if got["measured_speedup"] else None
        rows.append(f'<tr class="sv-parts-{method}"><th style="color:{METHOD_COLORS[method]}">'
                    f'{esc(METHOD_LABELS.get(method, method))}</th>{cells}<td><b>{got["predicted_speedup"]:.2f}x</b></td>'
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
