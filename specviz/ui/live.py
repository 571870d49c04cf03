"""Light live views: the tree, the Jacobi window and per-step latency as small inline SVG/HTML.

While a race streams, a same-machine browser must stay nearly idle (issue 12):
a plotly redraw of six figures a second kept Chromium's renderer at half a core
and grew its memory run over run, and every cycle it took was taken from the
decoders. These views draw the same facts as a few kilobytes of static markup
(no scripts, no hover); the plotly figures, with their hover details, come back
when the race ends and in replay. Pure functions of trace data, like figures.py.
"""

from __future__ import annotations

from ..trace import PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY, LookaheadPayload, RunTrace, TreePayload
from .figures import BONUS_COLOR, METHOD_COLORS, METHOD_LABELS, NODE_COLORS, PHASE_COLORS, _show, tree_positions
from .figures import window_grid
from .html import esc

LATENCY_STEPS = 48   # the latest steps per method in the live latency strip


def _box(title: str, body: str, note: str = "") -> str:
    sub = f'<div style="font-size:13px;color:#6b7280">{esc(note)}</div>' if note else ""
    return (f'<div class="sv-live" style="border:1px solid #e5e7eb;border-radius:8px;padding:8px 10px">'
            f'<div style="font-size:17px;font-weight:600">{esc(title)}</div>{sub}{body}</div>')


def tree_svg(payload: TreePayload | None, step: int | None = None) -> str:
    """The speculated tree: nodes coloured by outcome, the accepted path thick, the bonus token a star."""
    title = "Sequoia token tree" + (f" — step {step}" if step is not None else " (live)")
    if payload is None or not payload.nodes:
        return _box(title, '<div style="color:#9ca3af;padding:40px 0">the tree appears here when Sequoia runs</div>')
    pos = tree_positions(payload)
    depth = max(int(x) for x, _ in pos.values()) + 2
    widest = max(sum(1 for p in pos.values() if p[0] == x) for x in {p[0] for p in pos.values()})
    width, height = 140 * depth + 40, max(220, 22 * widest + 40)

    def xy(node_id):
        x, y = pos[node_id]
        return 20 + 140 * x, height / 2 - y * (height / 2 - 20)

    on_path = set(payload.accepted_path)
    edges, nodes = [], []
    for n in payload.nodes:
        if n.parent >= 0 and n.parent in pos:
            (x0, y0), (x1, y1) = xy(n.parent), xy(n.id)
            accepted = n.id in on_path
            edges.append(f'<line x1="{x0:.0f}" y1="{y0:.0f}" x2="{x1:.0f}" y2="{y1:.0f}" '
                         f'stroke="{NODE_COLORS["accepted"] if accepted else "#cbd5e1"}" '
                         f'stroke-width="{4 if accepted else 1.5}"/>')
        x, y = xy(n.id)
        color = NODE_COLORS.get(n.status, NODE_COLORS["not_reached"])
        label = ("▶ " if n.parent < 0 else "") + _show(n.text)
        nodes.append(f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{8 if n.id in on_path or n.parent < 0 else 6}" '
                     f'fill="{color}"/><text x="{x + 11:.0f}" y="{y + 5:.0f}">{esc(label[:14])}</text>')
    if payload.bonus_token_id is not None:
        last = payload.accepted_path[-1] if payload.accepted_path else payload.nodes[0].id
        x0, y0 = xy(last)
        x1 = x0 + 140
        edges.append(f'<line x1="{x0:.0f}" y1="{y0:.0f}" x2="{x1:.0f}" y2="{y0:.0f}" stroke="{BONUS_COLOR}" '
                     f'stroke-width="3" stroke-dasharray="6 4"/>')
        nodes.append(f'<text x="{x1 - 8:.0f}" y="{y0 + 7:.0f}" fill="{BONUS_COLOR}" font-size="22">★</text>'
                     f'<text x="{x1 + 14:.0f}" y="{y0 + 5:.0f}">{esc(_show(payload.bonus_text or "")[:14])}</text>')
    accepted = len(payload.accepted_path)
    note = (f"{len(payload.nodes)} nodes (budget {payload.budget}, depth {payload.depth}); {accepted} accepted "
            f"+ 1 bonus = {accepted + (payload.bonus_token_id is not None)} tokens. Hover details when the race ends.")
    svg = (f'<svg viewBox="0 0 {width} {height}" width="100%" style="max-height:520px;font:14px sans-serif">'
           + "".join(edges) + "".join(nodes) + "</svg>")
    return _box(title, svg, note)


def window_html(payload: LookaheadPayload | None, step: int | None = None) -> str:
    """The Jacobi window as a table: one column per future position, newest guesses at the bottom."""
    title = "Lookahead Jacobi window" + (f" — step {step}" if step is not None else " (live)")
    if payload is None or not payload.window:
        return _box(title, '<div style="color:#9ca3af;padding:30px 0">the window appears here when Lookahead runs</div>')
    grid, levels, width = window_grid(payload)
    rows = []
    for level, row in enumerate(grid):
        shade = 0.15 + 0.6 * (level + 1) / max(levels, 1)
        cells = "".join(f'<td style="background:rgba(245,158,11,{shade if cell else 0:.2f});padding:3px 6px;'
                        f'border-radius:4px">{esc(cell[:12])}</td>' for cell in row)
        rows.append(f'<tr><th style="font-weight:400;color:#6b7280;padding-right:6px">level {level}</th>{cells}</tr>')
    warm = " (warm-up)" if payload.warmup else ""
    return _box(title + warm, f'<table style="border-spacing:3px;font-size:14px">{"".join(rows)}</table>',
                f"{levels} levels × W={width}; each column is one Jacobi trajectory")


def latency_svg(runs: dict[str, RunTrace], upto: dict[str, int] | None = None) -> str:
    """Each method's latest step times, stacked draft / target / verify, one strip per method."""
    strips = []
    for method, run in runs.items():
        steps = run.steps[:(upto or {}).get(method, len(run.steps))][-LATENCY_STEPS:]
        if not steps:
            continue
        top = max(s.total_ms for s in steps) or 1.0
        bars = []
        for i, s in enumerate(steps):
            y = 60.0
            for phase in (PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY):
                h = 56 * s.time_ms.get(phase, 0.0) / top
                if h > 0.2:
                    y -= h
                    bars.append(f'<rect x="{i * 8}" y="{y:.1f}" width="7" height="{h:.1f}" fill="{PHASE_COLORS[phase]}"/>')
        last = steps[-1].total_ms
        strips.append(f'<div style="display:flex;align-items:center;gap:8px"><span style="width:120px;'
                      f'color:{METHOD_COLORS.get(method, "#111")};font-weight:600">{esc(METHOD_LABELS.get(method, method))}'
                      f'</span><svg viewBox="0 0 {LATENCY_STEPS * 8} 60" width="70%" height="60">{"".join(bars)}</svg>'
                      f'<span style="font-size:13px;color:#6b7280">{last:.0f} ms<br>max {top:.0f}</span></div>')
    if not strips:
        return _box("Per-step latency (live)", '<div style="color:#9ca3af">latency per step appears here</div>')
    return _box("Per-step latency (live)", "".join(strips),
                "latest steps, stacked: draft (light blue), target forward (dark blue), verify (grey)")
