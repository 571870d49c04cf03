"""The app's race views as inline SVG/HTML: tree, Jacobi window, latency, tokens over time, pool size, t(n).

Why not plotly in the app: measured in Chromium (issue 12), every `gr.Plot` update leaves about 65 event listeners
behind that garbage collection never frees, and redrawing six figures a second kept a same-machine renderer at half
a core, taking those cycles from the decoders. These views are a few kilobytes of static markup each (no scripts;
hover details come from SVG `<title>` tooltips), cheap to redraw live and in replay. The notebook shows these same
views (one renderer per view: what the lesson draws is what the page draws). Pure functions of trace data.
"""

from __future__ import annotations

import math
from itertools import accumulate

from ..trace import ORIGIN_COPY, PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY, LookaheadPayload, RunTrace, TreePayload
from .figures import (BONUS_COLOR, COPY_COLOR, METHOD_COLORS, METHOD_LABELS, NODE_COLORS, PHASE_COLORS, PHASE_LABELS,
                      TREE_LEGEND, _show, draft_saw, plural, rejected_before, tested_as, tree_positions, window_grid)
from .html import esc

LIVE_LATENCY_STEPS = 48   # while a race streams, the latency strip shows the latest steps only
STACKED_PHASES = (PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY)   # a latency bar's parts, bottom to top
FONT = "font:14px Inter,Segoe UI,Arial,sans-serif"


def _box(title: str, body: str, note: str = "") -> str:
    sub = (f'<div class="sv-view-note" style="font-size:13px;color:#4b5563;margin:2px 0 6px">{esc(note)}</div>'
           if note else "")
    return (f'<div class="sv-view" style="border:1px solid #e5e7eb;border-radius:8px;padding:8px 10px;{FONT}">'
            f'<div style="font-size:17px;font-weight:600">{esc(title)}</div>{sub}{body}</div>')


def _empty(title: str, message: str) -> str:
    return _box(title, f'<div style="color:#9ca3af;padding:36px 0;text-align:center">{esc(message)}</div>')


TREE_LABEL_CHARS = 10    # longer tokens are shortened on the tree (full text on hover), so labels never overlap
WINDOW_CELL_CHARS = 9


def short(text: str, limit: int) -> str:
    """A label cut to `limit` characters with an ellipsis (the full text goes in a tooltip)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _legend(items: list[tuple[str, str]]) -> str:
    return "".join(f'<span style="display:inline-flex;align-items:center;margin-right:14px;font-size:13px">'
                   f'<span style="background:{c};width:12px;height:12px;border-radius:6px;display:inline-block;'
                   f'margin-right:5px"></span>{esc(label)}</span>' for label, c in items)


# ----------------------------------------------------------------------------- Sequoia's tree

LABEL_PX = 15   # the tree's labels' font size
STAR_PX = 24
# The presenter view draws the same tree's labels at 22 (static/page.css), so a label's box is as wide as
# that: the bonus line and star start past the label at either size.
PRESENTER_LABEL_PX = 22


def text_width(text: str, size: float = LABEL_PX) -> float:
    """A generous estimate of a label's drawn width: symbols (▶ ★ ⏎ and most non-Latin) count as a whole em."""
    return sum(size * (0.62 if ord(c) < 0x2000 or c in "·…" else 1.05) for c in text)


def _text_box(x: float, baseline: float, text: str, size: float = LABEL_PX) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) a label drawn at (x, baseline) covers, ascent and descent included; a tree
    label as wide as the presenter view draws it."""
    wide = PRESENTER_LABEL_PX if size == LABEL_PX else size
    return (x, baseline - 0.95 * size, x + text_width(text, wide), baseline + 0.3 * size)


def _overlaps(a, b, gap: float = 2.0) -> bool:
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _bonus_place(start: tuple[float, float], column_end: float, drawn: list, bonus: str, right_edge: float,
                 height: float) -> tuple[float, float, float, float]:
    """(star x, star y, label x, label baseline) for the bonus star after the last node, whose label ends at
    `start`; the star, its label and the dashed line to it clear of every node and label already `drawn`:
    past the labels of the node's column, on the node's row first, then a row above or below, and past the
    whole drawing as the last resort."""
    x0, y0 = start

    def boxes(sx, sy, lx, ly):   # the star, its label, and the dashed line to the star (it ends at sx - 14)
        return [_text_box(sx - 10, sy + 8, "★", STAR_PX), _text_box(lx, ly, bonus),
                (min(x0, sx - 14), min(y0, sy) - 2.0, max(x0, sx - 14), max(y0, sy) + 2.0)]

    def fits(sx, sy, lx, ly):
        inside = all(b[1] >= 2 and b[3] <= height - 2 for b in boxes(sx, sy, lx, ly))
        return inside and not any(_overlaps(b, d) for b in boxes(sx, sy, lx, ly) for d in drawn)

    tries = []
    for sx in (max(x0 + 36, column_end + 36), right_edge + 24):
        for dy in (0, -26, 26, -52, 52):
            sy = y0 + dy
            tries += [(sx, sy, sx + 20, sy + 5), (sx, sy, sx - 4, sy - 20), (sx, sy, sx - 4, sy + 30)]
    for place in tries:
        if fits(*place):
            return place
    sx = right_edge + 24   # nothing fits: beside the drawing's right edge, the label after the star
    return (sx, y0, sx + 20, y0 + 5)


def tree_svg(payload: TreePayload | None, step: int | None = None, method: str | None = None) -> str:
    """The speculated tree of one step of `method` (Sequoia's, or a copied chain's): nodes coloured by outcome,
    the accepted path thick, the bonus token a star; hovering a node shows its token, q and P. No mark or label
    overlaps another: each label's box is known, and the star goes where it touches none."""
    title = (f"{METHOD_LABELS.get(method, method)} token tree" if method else "Speculated token tree") + (
        f" — step {step}" if step is not None else "")
    if payload is None or not payload.nodes:
        return _empty(title, "the tree appears here when Sequoia runs")
    pos = tree_positions(payload)
    levels = max(int(round(x)) for x, _ in pos.values()) + 2
    widest = max(sum(1 for p in pos.values() if p[0] == x) for x in {p[0] for p in pos.values()})
    # 150 px per level holds a 10-character label at 15 px; 26 px per sibling keeps rows apart.
    height = max(240, 26 * widest + 40)

    def xy(node_id):
        x, y = pos[node_id]
        return 24 + 150 * x, height / 2 - y * (height / 2 - 20)

    on_path = set(payload.accepted_path)
    by_id, after = {n.id: n for n in payload.nodes}, rejected_before(payload)
    edges, marks, drawn = [], [], []
    label_end: dict[float, float] = {}   # a column's x -> where its longest label ends
    label_box: dict[int, tuple] = {}     # node id -> its label's box
    for n in payload.nodes:
        if n.parent >= 0 and n.parent in pos:
            (x0, y0), (x1, y1) = xy(n.parent), xy(n.id)
            accepted = n.id in on_path
            edges.append(f'<line x1="{x0:.0f}" y1="{y0:.0f}" x2="{x1:.0f}" y2="{y1:.0f}" '
                         f'stroke="{NODE_COLORS["accepted"] if accepted else "#cbd5e1"}" '
                         f'stroke-width="{5 if accepted else 1.5}"/>')
        x, y = xy(n.id)
        color = NODE_COLORS.get(n.status, NODE_COLORS["not_reached"])
        label = short(("▶ " if n.parent < 0 else "") + _show(n.text), TREE_LABEL_CHARS)
        radius = 9 if n.id in on_path or n.parent < 0 else 7
        label_box[n.id] = _text_box(x + 12, y + 5, label)
        drawn += [(x - radius, y - radius, x + radius, y + radius), label_box[n.id]]
        label_end[x] = max(label_end.get(x, 0.0), label_box[n.id][2])
        copied = n.origin == ORIGIN_COPY
        tip = (f"{_show(n.text)} (id {n.token_id}) — {n.status}, depth {n.depth}\n" + (
               f"copied from the text so far (prompt lookup): q = 1, target P = {n.target_prob:.3f}" if copied else
               f"draft q = {n.draft_prob:.3f}, target P = {n.target_prob:.3f}{draft_saw(n, by_id.get(n.parent), chr(10))}")
               + tested_as(n, after.get(n.id, 0), "\n"))
        ring = f'stroke="{COPY_COLOR}" stroke-width="4"' if copied else 'stroke="#fff" stroke-width="1.5"'
        marks.append(f'<g class="sv-node sv-{esc(n.status)}{" sv-copy" if copied else ""}" font-size="{LABEL_PX}">'
                     f'<title>{esc(tip)}</title><circle cx="{x:.0f}" cy="{y:.0f}" r="{radius}" '
                     f'fill="{color}" {ring}/>'
                     f'<text x="{x + 12:.0f}" y="{y + 5:.0f}" paint-order="stroke" stroke="#fff" stroke-width="4" '
                     f'stroke-linejoin="round">{esc(label)}</text></g>')
    right_edge = max(b[2] for b in drawn)
    if payload.bonus_token_id is not None:
        last = payload.accepted_path[-1] if payload.accepted_path else payload.nodes[0].id
        x0, y0 = xy(last)
        bonus = short(_show(payload.bonus_text or ""), TREE_LABEL_CHARS)
        # The dashed line starts where the node's label ends: drawn through the label, it showed between
        # the glyphs (a root-only step read "▶▾·Avoid").
        start = (label_box[last][2] + 3, y0)
        sx, sy, lx, ly = _bonus_place(start, label_end[x0], drawn, bonus, right_edge, height)
        right_edge = max(right_edge, _text_box(sx - 10, sy + 8, "★", STAR_PX)[2], _text_box(lx, ly, bonus)[2])
        edges.append(f'<line class="sv-bonus-edge" x1="{start[0]:.0f}" y1="{start[1]:.0f}" x2="{sx - 14:.0f}" '
                     f'y2="{sy:.0f}" stroke="{BONUS_COLOR}" stroke-width="4" stroke-dasharray="7 5"/>')
        marks.append(f'<g class="sv-bonus"><title>{esc(f"bonus / corrected token: {bonus} (id {payload.bonus_token_id}), sampled by the target after the accepted path")}</title>'
                     f'<text x="{sx - 10:.0f}" y="{sy + 8:.0f}" fill="{BONUS_COLOR}" font-size="{STAR_PX}">★</text>'
                     f'<text x="{lx:.0f}" y="{ly:.0f}" fill="#92400e" font-weight="600" font-size="{LABEL_PX}" '
                     f'paint-order="stroke" stroke="#fff" stroke-width="4">{esc(bonus)}</text></g>')
    # Wide enough for the last column's labels and the star: a narrower drawing is scaled down less.
    width = max(150 * (levels - 2) + 24 + 200, right_edge + 12)
    accepted = len(payload.accepted_path)
    made = accepted + (payload.bonus_token_id is not None)
    if len(payload.nodes) == 1:
        note = ("Only the root: nothing was drafted this step (no room left to speculate, so its one token is the "
                "target's own), a plain target forward. Step back (◀) to see a tree.")
    else:
        note = (f"{plural(len(payload.nodes), 'node')} (budget {payload.budget}, depth {payload.depth}); "
                f"{accepted} accepted + 1 bonus = {plural(made, 'token')} from one target forward")
    copied = any(n.origin == ORIGIN_COPY for n in payload.nodes)
    legend = _legend([*TREE_LEGEND, *([("copied from the text (ring)", COPY_COLOR)] if copied else [])])
    # A small tree keeps about its drawn size instead of being blown up to the column's width.
    svg = (f'<svg viewBox="0 0 {width:.0f} {height}" width="100%" '
           f'style="max-height:560px;max-width:{int(1.6 * width)}px">' + "".join(edges) + "".join(marks) + "</svg>")
    return _box(title, legend + svg, note)


# ----------------------------------------------------------------------------- Lookahead's window and pool


def window_html(payload: LookaheadPayload | None, step: int | None = None) -> str:
    """The Jacobi window as a table: one column per future position, newest guesses at the bottom."""
    title = "Lookahead Jacobi window" + (f" — step {step}" if step is not None else "")
    if payload is None or not payload.window:
        return _empty(title, "the window appears here when Lookahead runs")
    grid, levels, width = window_grid(payload)
    rows = []
    for level, row in enumerate(grid):
        shade = 0.15 + 0.6 * (level + 1) / max(levels, 1)
        cells = "".join(f'<td title="level {level}, column {col}: {esc(cell)}" style="background:'
                        f'rgba(245,158,11,{shade if cell else 0:.2f});padding:3px 7px;border-radius:4px;'
                        f'font-family:ui-monospace,monospace;white-space:pre">{esc(short(cell, WINDOW_CELL_CHARS))}</td>'
                        for col, cell in enumerate(row))
        rows.append(f'<tr><th style="font-weight:400;color:#6b7280;padding-right:6px;text-align:right">'
                    f'level {level}</th>{cells}</tr>')
    head = "".join(f'<th style="font-weight:400;color:#6b7280">{i}</th>' for i in range(width))
    warm = " (warm-up)" if payload.warmup else ""
    return _box(title + warm, f'<table style="border-spacing:3px;font-size:14px;table-layout:fixed"><tr><th></th>{head}</tr>'
                              f'{"".join(rows)}</table>',
                f"{plural(levels, 'level')} × W={width}; each column is one Jacobi trajectory (column = future position)")


class Frame:
    """A line chart's drawing (`width` x `height` px) and its scales. The axes meet at (`left`, `height - bottom`);
    x runs from 0 (with `log_x`, from the least of `xs`, in log2) to the largest of `xs`, y from 0 to `y_hi`, each
    reaching its largest value `pad` px short of the drawing's right or top edge. `_line_chart` here and the
    what-if panel's `chart` draw on it."""

    def __init__(self, width: int, height: int, left: int, bottom: int, pad: int, xs, y_hi: float,
                 log_x: bool = False):
        self.width, self.left, self.pad, self.log_x, self.y_hi = width, left, pad, log_x, y_hi
        self.base = height - bottom   # the x axis's y
        along = [self._along(x) for x in xs]
        self.x_lo = min(along) if log_x else 0.0
        self.x_hi = max(along) or 1.0

    def _along(self, v: float) -> float:
        """Where `v` falls along the x axis before scaling: itself, or its log2."""
        return math.log2(max(v, 1e-9)) if self.log_x else v

    def x(self, v: float) -> float:
        spread = (self.x_hi - self.x_lo) or 1.0
        return self.left + (self._along(v) - self.x_lo) / spread * (self.width - self.left - self.pad)

    def y(self, v: float) -> float:
        return self.base - v / self.y_hi * (self.base - self.pad)

    def axes(self, top: int) -> list[str]:
        """The x axis, and the y axis from `top` down to it."""
        return [f'<line x1="{self.left}" y1="{self.base}" x2="{self.width - 8}" y2="{self.base}" stroke="#9ca3af"/>',
                f'<line x1="{self.left}" y1="{top}" x2="{self.left}" y2="{self.base}" stroke="#9ca3af"/>']

    def polyline(self, points: list[tuple[float, float]], colour: str, label: str, stroke_width: float,
                 dashed: bool = False) -> str:
        """One series through `points`, its `label` on hover."""
        coords = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        return (f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{stroke_width}"{dash}>'
                f'<title>{esc(label)}</title></polyline>')


def _staircase(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The corners of a step line through `points`: each y held until the next x."""
    corners = points[:1]
    for (_, y0), (x1, y1) in zip(points, points[1:]):
        corners += [(x1, y0), (x1, y1)]
    return corners


def _line_chart(series: list[tuple[str, str, list[tuple[float, float]]]], x_label: str, y_label: str,
                step: bool = False, log_x: bool = False, height: int = 240) -> str:
    """A small line chart: [(label, colour, [(x, y), ...])], axes from 0 (or log x)."""
    points = [p for _, _, pts in series for p in pts]
    y_hi = max(y for _, y in points) or 1.0
    w, h, left, bottom = 560, height, 48, 34
    frame = Frame(w, h, left, bottom, 12, [x for x, _ in points], y_hi, log_x)
    parts = frame.axes(top=10) + [
        f'<text x="{left - 6}" y="16" text-anchor="end" font-size="12">{y_hi:.4g}</text>',
        f'<text x="{left - 6}" y="{h - bottom}" text-anchor="end" font-size="12">0</text>',
        # The axis title sits below the tick labels, the unit of y beside its top value: nothing overlaps.
        f'<text x="{w - 8}" y="{h - 2}" text-anchor="end" font-size="12">{esc(x_label)}</text>',
        f'<text x="{left + 6}" y="16" font-size="12">{esc(y_label)} ↑</text>']
    for label, color, pts in series:
        last_x, last_y = pts[-1]
        parts.append(frame.polyline(_staircase(pts) if step else pts, color, label, 3))
        parts.append(f'<circle cx="{frame.x(last_x):.1f}" cy="{frame.y(last_y):.1f}" r="4" fill="{color}">'
                     f'<title>{esc(f"{label}: {last_y:.4g} at {last_x:.4g}")}</title></circle>')
    if log_x:
        for x, _ in series[0][2]:
            parts.append(f'<text x="{frame.x(x):.1f}" y="{h - bottom + 15}" text-anchor="middle" font-size="11">'
                         f'{x:g}</text>')
    else:
        parts.append(f'<text x="{w - 8}" y="{h - bottom + 14}" text-anchor="end" font-size="12">'
                     f'{max(x for x, _ in points):.3g}</text>')
    return f'<svg viewBox="0 0 {w} {h}" width="100%" style="max-height:{h + 40}px">{"".join(parts)}</svg>'


def pool_size_svg(run: RunTrace | None, upto: int | None = None) -> str:
    title = "n-gram pool size"
    steps = [] if run is None else run.steps[:upto]
    points = [(float(s.step), float(s.payload.pool_size)) for s in steps if isinstance(s.payload, LookaheadPayload)]
    if not points:
        return _empty(title, "pool size over time appears here")
    return _box(title, _line_chart([("pool size", METHOD_COLORS.get(run.method, "#111"), points)],
                                   f"{METHOD_LABELS.get(run.method, run.method)} step", "n-grams", height=200))


# ----------------------------------------------------------------------------- latency and the race


def latency_svg(runs: dict[str, RunTrace], upto: dict[str, int] | None = None, live: bool = False) -> str:
    """Per-step latency per method, stacked draft / target / verify; hover a bar for its numbers."""
    title = "Per-step latency (ms, stacked by phase)"
    strips = []
    for method, run in runs.items():
        steps = run.steps[:(upto or {}).get(method, len(run.steps))]
        if live:
            steps = steps[-LIVE_LATENCY_STEPS:]
        if not steps:
            continue
        top = max(s.total_ms for s in steps) or 1.0
        bar = max(2.0, min(10.0, 480 / len(steps)))
        bars = []
        for i, s in enumerate(steps):
            y = 64.0
            tip = f"step {s.step}: " + ", ".join(f"{PHASE_LABELS[p]} {s.time_ms.get(p, 0.0):.1f} ms"
                                                 for p in STACKED_PHASES if p in s.time_ms)
            rects = []
            for phase in STACKED_PHASES:
                hgt = 60 * s.time_ms.get(phase, 0.0) / top
                if hgt > 0.2:
                    y -= hgt
                    rects.append(f'<rect x="{i * bar:.1f}" y="{y:.1f}" width="{bar * 0.85:.1f}" height="{hgt:.1f}" '
                                 f'fill="{PHASE_COLORS[phase]}"/>')
            bars.append(f'<g><title>{esc(tip)}</title>{"".join(rects)}</g>')
        med = sorted(s.total_ms for s in steps)[len(steps) // 2]
        strips.append(f'<div style="display:flex;align-items:center;gap:8px;margin:4px 0"><span style="width:118px;'
                      f'color:{METHOD_COLORS.get(method, "#111")};font-weight:600">'
                      f'{esc(METHOD_LABELS.get(method, method))}</span>'
                      f'<svg viewBox="0 0 {max(bar * len(steps), 1):.0f} 64" preserveAspectRatio="none" width="72%" '
                      f'height="64">{"".join(bars)}</svg><span style="font-size:12px;color:#4b5563;white-space:nowrap">median '
                      f'{med:.0f} ms<br>max {top:.0f} ms</span></div>')
    if not strips:
        return _empty(title, "latency per step appears here")
    legend = _legend([(PHASE_LABELS[p], PHASE_COLORS[p]) for p in STACKED_PHASES])
    note = "the latest steps" if live else "one bar per step (one target forward)"
    return _box(title, legend + "".join(strips), note)


def cumulative_svg(runs: dict[str, RunTrace], upto: dict[str, int] | None = None) -> str:
    """Tokens generated against each method's own compute time (steeper = faster)."""
    title = "Tokens over time (steeper = faster)"
    series = []
    for method, run in runs.items():
        steps = run.steps[:(upto or {}).get(method, len(run.steps))]
        if not steps:
            continue
        seconds = accumulate((s.total_ms / 1000 for s in steps), initial=0.0)
        pts = list(zip(seconds, [0.0] + [float(s.cumulative_tokens) for s in steps]))
        series.append((METHOD_LABELS.get(method, method), METHOD_COLORS.get(method, "#111"), pts))
    if not series:
        return _empty(title, "cumulative tokens appear here")
    legend = _legend([(label, color) for label, color, _ in series])
    return _box(title, legend + _line_chart(series, "seconds of the method's own compute", "tokens", step=True))


BANDWIDTH_COLOR, ARITHMETIC_COLOR = "#9ca3af", "#d97706"


def forward_curve_svg(curve: dict, title: str = "Measured target forward time t(n)",
                      floors: dict | None = None) -> str:
    """The measured cost of one target forward over n new tokens (log n); with `floors` (n -> (bandwidth ms,
    arithmetic ms or None), `engine.floors.floors_ms`) the two floors no forward can beat, beside it."""
    if not curve:
        return _empty(title, "no forward-time profile measured yet for this model pair (run once with 'auto' sizes)")
    points = sorted((float(n), float(ms)) for n, ms in curve.items())
    series = [("t(n)", "#1e3a8a", points)]
    note = ""
    if floors:
        ns = sorted(float(n) for n in floors)
        series.append(("bandwidth floor: bytes read ÷ read bandwidth", BANDWIDTH_COLOR,
                       [(n, floors[n][0]) for n in ns]))
        if all(floors[n][1] is not None for n in ns):
            series.append(("arithmetic floor: MACs ÷ int8 peak", ARITHMETIC_COLOR, [(n, floors[n][1]) for n in ns]))
        note = ("No forward can beat the higher of its two floors: where the bandwidth floor is higher, more rows "
                "are nearly free (memory-bound); past the crossing each row costs its share (compute-bound).")
    legend = _legend([(label, color) for label, color, _ in series]) if floors else ""
    return _box(title, _line_chart(series, "new tokens in one forward (n)", "ms", log_x=True) + legend, note)
