"""Plotly figures from traces: pure functions, no model, no gradio.

Every function takes plain trace data (payloads, `RunTrace`, `RaceTrace`) and returns a `go.Figure`, so replay of
an uploaded trace draws exactly what the live run drew.
"""

from __future__ import annotations

from itertools import accumulate

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..methods import colours, labels
from ..trace import PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY, LookaheadPayload, RunTrace, TreePayload
from .escape import esc

METHOD_LABELS = labels()
METHOD_COLORS = colours()

# Tree node colours by status (also used in the legend text).
NODE_COLORS = {"root": "#374151", "accepted": "#2563eb", "rejected": "#dc2626", "not_reached": "#d1d5db"}
BONUS_COLOR = "#f59e0b"
COPY_COLOR = "#db2777"   # a tree node copied from the text (prompt lookup): its ring
TREE_LEGEND = (("accepted", NODE_COLORS["accepted"]), ("rejected", NODE_COLORS["rejected"]),
               ("not reached", NODE_COLORS["not_reached"]), ("bonus", BONUS_COLOR))
PHASE_COLORS = {PHASE_DRAFT: "#60a5fa", PHASE_TARGET: "#1e3a8a", PHASE_VERIFY: "#a3a3a3"}
PHASE_LABELS = {PHASE_DRAFT: "draft", PHASE_TARGET: "target forward", PHASE_VERIFY: "verify / other"}
FONT = dict(family="Inter, Segoe UI, Arial, sans-serif", size=15)


def _base_layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=18)), height=height, font=FONT,
                      margin=dict(l=40, r=20, t=50, b=40), plot_bgcolor="white", paper_bgcolor="white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    return fig


def empty_figure(title: str, message: str, height: int = 300) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=16, color="#6b7280"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, title, height)


def _esc(text) -> str:
    """`html.esc`, for plotly's text: its labels, hover texts and titles are HTML too (`<b>`, `<a href>`), so a
    trace's strings go through the same escaping as every other view's (quotes kept: plotly writes its text as
    text, never into an attribute of ours)."""
    return esc(text, quote=False)


def _show(text: str) -> str:
    """Token text made visible: spaces and newlines drawn, never blank."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·")
    return shown if shown else "∅"


# ---------------------------------------------------------------------------
# Sequoia: the token tree
# ---------------------------------------------------------------------------


def draft_saw(node, parent, sep: str) -> str:
    """A feature draft's input for `node`: its `parent` node's token with the hidden state it read
    (the target's own at depth 1, the draft's prediction deeper); "" for an independent draft."""
    if not getattr(node, "draft_input", ""):
        return ""
    token = f"'{_show(parent.text)}'" if parent is not None else "the last token"
    return f"{sep}draft saw: {token} + {node.draft_input}"


def rejected_before(payload: TreePayload) -> dict[int, int]:
    """Node id -> how many of its earlier siblings were tested and rejected: a node after one or more was
    tested against the residual they left, not against its own P and q."""
    count: dict[int, int] = {}
    seen: dict[int, int] = {}
    for n in sorted(payload.nodes, key=lambda n: n.id):   # breadth-first ids: drawing order among siblings
        if n.parent < 0:
            continue
        count[n.id] = seen.get(n.parent, 0)
        seen[n.parent] = count[n.id] + (n.status == "rejected")
    return count


def tested_as(node, after: int, sep: str) -> str:
    """How `node` was tested, from what the walk recorded (`TreeNode.accept_prob`, `uniform`, `tested_p`,
    `tested_q`), `after` its rejected earlier siblings; "" where it was not tested or the trace predates
    the record."""
    a = getattr(node, "accept_prob", None)
    if a is None:
        return ""
    if node.uniform is None:   # greedy: no draw
        return f"{sep}greedy test: {'the' if a >= 1 else 'not the'} target's top choice, so {node.status}"
    if after and node.tested_p is not None:
        rule = (f"after {after} rejected sibling{'s' if after != 1 else ''}, against the residual: "
                f"P' = {node.tested_p:.3f}, q' = {node.tested_q:.3f}, min(1, P'/q') = {a:.3f}")
    else:
        rule = f"min(1, P/q) = {a:.3f}"
    verdict = "<" if node.uniform < a else "≥"
    return f"{sep}tested: {rule}{sep}draw u = {node.uniform:.3f} {verdict} {a:.3f}, so {node.status}"


def tree_positions(payload: TreePayload) -> dict[int, tuple[float, float]]:
    """Node id -> (x, y): depth left to right, siblings top to bottom (networkx BFS layers)."""
    return parent_positions([(node.id, node.parent) for node in payload.nodes])


def parent_positions(edges: list[tuple[int, int]]) -> dict[int, tuple[float, float]]:
    """`tree_positions` for (node id, parent id) pairs, the parent -1 for the root."""
    graph = nx.DiGraph()
    graph.add_nodes_from(nid for nid, _ in edges)
    graph.add_edges_from((parent, nid) for nid, parent in edges if parent >= 0)
    roots = [nid for nid, parent in edges if parent < 0]
    if not roots:
        return {}
    # Siblings ordered by node id (breadth-first numbering keeps children of a node together).
    layers = [sorted(layer) for layer in nx.bfs_layers(graph, roots[:1])]
    pos = {}
    for depth, layer in enumerate(layers):
        span = max(len(layer) - 1, 1)
        for i, nid in enumerate(layer):
            pos[nid] = (float(depth), 1.0 - 2.0 * i / span if len(layer) > 1 else 0.0)
    # Nodes unreachable from the root (should not happen) go to the far right.
    for nid, _ in edges:
        pos.setdefault(nid, (float(len(layers)), 0.0))
    return pos


def tree_figure(payload: TreePayload | None, step: int | None = None, height: int | None = None) -> go.Figure:
    """The speculated tree of one Sequoia step: one marker per node, coloured by outcome."""
    title = "Sequoia token tree" + (f" — step {step}" if step is not None else "")
    if payload is None or not payload.nodes:
        return empty_figure(title, "the tree appears here when Sequoia runs", height or 460)
    pos = tree_positions(payload)
    # Tall enough that the widest level's labels do not overlap (about 24 px per node).
    widest = max((sum(1 for p in pos.values() if p[0] == x) for x in {p[0] for p in pos.values()}), default=1)
    height = height or max(460, 24 * widest + 120)
    on_path = set(payload.accepted_path)
    by_id = {n.id: n for n in payload.nodes}
    root_id = next((n.id for n in payload.nodes if n.parent < 0), payload.nodes[0].id)

    fig = go.Figure()
    # Edges: plain grey, the accepted path thick green.
    for accepted in (False, True):
        xs, ys = [], []
        for node in payload.nodes:
            if node.parent < 0 or node.parent not in pos or (node.id in on_path) != accepted:
                continue
            (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
            name="accepted path" if accepted else "edges",
            line=dict(color=NODE_COLORS["accepted"] if accepted else "#cbd5e1", width=5 if accepted else 1.5)))

    nodes = payload.nodes
    colors = [NODE_COLORS.get(n.status, NODE_COLORS["not_reached"]) for n in nodes]
    sizes = [30 if n.id in on_path or n.parent < 0 else 22 for n in nodes]
    # Built as plain text with newlines, escaped whole, then the newlines made <br>: no upload's text is markup.
    after = rejected_before(payload)
    hover = [
        f"<b>{_esc(_show(n.text))}</b> " + _esc(
            f"(id {n.token_id})\nstatus: {n.status}\ndepth {n.depth}\ndraft q = {n.draft_prob:.3f}\n"
            f"target P = {n.target_prob:.3f}{draft_saw(n, by_id.get(n.parent), chr(10))}"
            f"{tested_as(n, after.get(n.id, 0), chr(10))}").replace("\n", "<br>")
        for n in nodes]
    fig.add_trace(go.Scatter(
        x=[pos[n.id][0] for n in nodes], y=[pos[n.id][1] for n in nodes], mode="markers+text",
        name="tree nodes", showlegend=False,
        marker=dict(color=colors, size=sizes, line=dict(color="white", width=1.5)),
        text=[_esc(_show(n.text) if n.parent >= 0 else "▶ " + _show(n.text)) for n in nodes],
        textposition="middle right", textfont=dict(size=16, color="#111827"), hovertext=hover,
        hoverinfo="text"))

    if payload.bonus_token_id is not None:
        last = payload.accepted_path[-1] if payload.accepted_path else root_id
        lx, ly = pos.get(last, (0.0, 0.0))
        bx, by = lx + 1.0, ly
        fig.add_trace(go.Scatter(x=[lx, bx], y=[ly, by], mode="lines", hoverinfo="skip", showlegend=False,
                                 name="bonus edge", line=dict(color=BONUS_COLOR, width=4, dash="dot")))
        fig.add_trace(go.Scatter(
            x=[bx], y=[by], mode="markers+text", name="bonus token", showlegend=False,
            marker=dict(symbol="star", color=BONUS_COLOR, size=34, line=dict(color="#92400e", width=1)),
            text=[_esc(_show(payload.bonus_text or ""))], textposition="middle right",
            textfont=dict(size=14, color="#92400e"),
            hovertext=[f"<b>bonus / corrected token</b><br>{_esc(_show(payload.bonus_text or ''))} "
                       f"(id {_esc(payload.bonus_token_id)})<br>sampled by the target after the accepted path"],
            hoverinfo="text"))

    # Legend as invisible markers so the colours are explained on the projector.
    for label, color in TREE_LEGEND:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label, showlegend=True,
                                 marker=dict(color=color, size=14, symbol="star" if label == "bonus" else "circle")))
    accepted = len(payload.accepted_path)
    subtitle = (f"{len(nodes)} nodes (budget {_esc(payload.budget)}, depth {_esc(payload.depth)}); "
                f"{accepted} accepted + 1 bonus = {accepted + (payload.bonus_token_id is not None)} tokens")
    fig = _base_layout(fig, f"{title}<br><sup>{subtitle}</sup>", height)
    max_x = max((p[0] for p in pos.values()), default=0) + (2.2 if payload.bonus_token_id is not None else 1.2)
    fig.update_xaxes(visible=False, range=[-0.4, max_x])
    fig.update_yaxes(visible=False, range=[-1.25, 1.25])
    fig.update_layout(margin=dict(l=10, r=10, t=70, b=10))
    return fig


def acceptance_figure(acceptance: list[float], by_depth: list[list[float]] | None = None,
                      title: str = "Acceptance vector", height: int = 340) -> go.Figure:
    """p[k]: how often the k-th child drawn at a node is the one the target accepts (per level, if measured)."""
    if not acceptance:
        return empty_figure(title, "no acceptance vector measured for this pair", height)
    ranks = list(range(1, len(acceptance) + 1))
    fig = go.Figure(go.Bar(x=ranks, y=list(acceptance), name="all levels", marker_color=NODE_COLORS["accepted"],
                           hovertemplate="child %{x}: p = %{y:.3f}<extra></extra>"))
    for level, row in enumerate(by_depth or [], start=1):
        fig.add_trace(go.Scatter(x=list(range(1, len(row) + 1)), y=list(row), mode="lines+markers",
                                 name=f"level {level}", hovertemplate=f"level {level}, child %{{x}}: "
                                                                      "p = %{y:.3f}<extra></extra>"))
    fig = _base_layout(fig, f"{title}<br><sup>the chance that the k-th child drawn at a node is the one the "
                            "target accepts</sup>", height)
    fig.update_xaxes(title="k (child drawn k-th, without replacement)", tickvals=ranks, gridcolor="#eee")
    fig.update_yaxes(title="acceptance p[k]", range=[0, 1], gridcolor="#eee")
    fig.update_layout(margin=dict(t=80))
    return fig


def planned_tree_figure(parents: list[int], acceptance: list[float], title: str = "Optimal tree",
                        height: int | None = None) -> go.Figure:
    """A tree shape (parents, breadth first, -1 for the root) from Sequoia's DP, each node labelled with its
    rank among its siblings and coloured by the chance the target reaches it (the product of p along its path)."""
    if not parents:
        return empty_figure(title, "no tree", height or 300)
    from ..sequoia.tree import TreeShape

    shape = TreeShape.from_parents(parents)
    pos = parent_positions(list(enumerate(parents)))
    rank, reach = shape.ranks, {}
    for nid, parent in enumerate(parents):   # breadth first: a parent comes before its children
        p = acceptance[rank[nid] - 1] if 0 < rank[nid] <= len(acceptance) else 0.0
        reach[nid] = 1.0 if parent < 0 else reach[parent] * p
    widest = max(sum(1 for p in pos.values() if p[0] == x) for x in {p[0] for p in pos.values()})
    height = height or max(360, 22 * widest + 120)
    xs, ys = [], []
    for nid, parent in enumerate(parents):
        if parent >= 0:
            xs += [pos[parent][0], pos[nid][0], None]
            ys += [pos[parent][1], pos[nid][1], None]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                               line=dict(color="#cbd5e1", width=1.5)))
    ids = list(range(len(parents)))
    fig.add_trace(go.Scatter(
        x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers+text", showlegend=False,
        marker=dict(size=22, color=[reach[i] for i in ids], colorscale="Blues", cmin=0, cmax=1,
                    colorbar=dict(title="reached", thickness=12), line=dict(color="#1e3a8a", width=1)),
        text=["root" if rank[i] == 0 else f"#{rank[i]}" for i in ids], textposition="middle right",
        hovertext=[f"node {i}, child #{rank[i]} of its parent<br>reached with probability {reach[i]:.3f}" for i in ids],
        hoverinfo="text"))
    value = sum(reach.values())
    fig = _base_layout(fig, f"{title}<br><sup>{len(parents)} nodes, depth {shape.depth}; "
                            f"expected accepted length {value:.2f} tokens per forward (the sum of the reach "
                            f"probabilities, root included)</sup>", height)
    fig.update_xaxes(visible=False, range=[-0.4, max(p[0] for p in pos.values()) + 1.0])
    fig.update_yaxes(visible=False, range=[-1.25, 1.25])
    fig.update_layout(margin=dict(l=10, r=10, t=70, b=10))
    return fig


# ---------------------------------------------------------------------------
# Lookahead: window, pool
# ---------------------------------------------------------------------------


def window_grid(payload: LookaheadPayload) -> tuple[list[list[str]], int, int]:
    """The window as a levels x W grid of texts (level 0 has W-1 tokens: its first cell is blank)."""
    rows = payload.window_text or [[str(t) for t in row] for row in payload.window]
    width = max([payload.window_size] + [len(r) for r in rows]) if rows else payload.window_size
    grid = [[""] * (width - len(row)) + [_show(t) for t in row] for row in rows]
    return grid, len(grid), width


def window_figure(payload: LookaheadPayload | None, step: int | None = None, height: int = 300) -> go.Figure:
    title = "Lookahead Jacobi window" + (f" — step {step}" if step is not None else "")
    if payload is None or not payload.window:
        return empty_figure(title, "the window appears here when Lookahead runs", height)
    grid, levels, width = window_grid(payload)
    z = [[(lvl + 1) if cell else 0 for cell in row] for lvl, row in enumerate(grid)]
    fig = go.Figure(go.Heatmap(
        z=z, text=[[_esc(cell) for cell in row] for row in grid], texttemplate="%{text}", textfont=dict(size=14),
        showscale=False,
        colorscale=[[0, "#ffffff"], [0.001, "#fef3c7"], [1, "#f59e0b"]], zmin=0, zmax=max(levels, 1),
        xgap=3, ygap=3, hovertemplate="level %{y}, column %{x}: %{text}<extra></extra>"))
    warm = " (warm-up)" if payload.warmup else ""
    fig = _base_layout(fig, f"{title}{warm}<br><sup>{levels} levels × W={width}; each column is one Jacobi "
                            f"trajectory, newest guesses at the bottom</sup>", height)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(levels)),
                     ticktext=[f"level {i}" for i in range(levels)], showgrid=False)
    fig.update_xaxes(tickmode="array", tickvals=list(range(width)), ticktext=[str(i) for i in range(width)],
                     showgrid=False, title="column (future position)")
    fig.update_layout(margin=dict(l=70, r=10, t=70, b=40))
    return fig


def pool_size_figure(run: RunTrace | None, upto: int | None = None, height: int = 260) -> go.Figure:
    title = "n-gram pool size"
    steps = [] if run is None else run.steps[:upto]
    points = [(s.step, s.payload.pool_size) for s in steps if isinstance(s.payload, LookaheadPayload)]
    if not points:
        return empty_figure(title, "pool size over time appears here", height)
    fig = go.Figure(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                               line=dict(color=METHOD_COLORS.get(run.method, "#111"), width=3), name="pool size"))
    fig = _base_layout(fig, title, height)
    fig.update_xaxes(title=f"{METHOD_LABELS.get(run.method, run.method)} step", gridcolor="#eee")
    fig.update_yaxes(title="n-grams", gridcolor="#eee", rangemode="tozero")
    return fig


# ---------------------------------------------------------------------------
# Latency and the race
# ---------------------------------------------------------------------------


def latency_figure(runs: dict[str, RunTrace], upto: dict[str, int] | None = None, height: int | None = None):
    """Per-step latency per method, stacked draft / target / verify (one row per method)."""
    methods = [m for m, r in runs.items() if r.steps]
    if not methods:
        return empty_figure("Per-step latency", "latency per step appears here", 300)
    fig = make_subplots(rows=len(methods), cols=1, shared_xaxes=False, vertical_spacing=0.12,
                        subplot_titles=[_esc(METHOD_LABELS.get(m, m)) for m in methods])
    for row, method in enumerate(methods, start=1):
        steps = runs[method].steps[:(upto or {}).get(method, len(runs[method].steps))]
        for phase in (PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY):
            fig.add_trace(go.Bar(
                x=[s.step for s in steps], y=[s.time_ms.get(phase, 0.0) for s in steps],
                name=PHASE_LABELS[phase], marker_color=PHASE_COLORS[phase], legendgroup=phase,
                showlegend=row == 1, hovertemplate=f"{PHASE_LABELS[phase]}: %{{y:.1f}} ms<extra></extra>"),
                row=row, col=1)
        fig.update_yaxes(title_text="ms", row=row, col=1, gridcolor="#eee")
    fig.update_layout(barmode="stack", bargap=0.1)
    fig.update_xaxes(title_text="step (one target forward)", row=len(methods), col=1)
    fig = _base_layout(fig, "Per-step latency (ms, stacked by phase)", height or 180 * len(methods) + 110)
    # Legend above the first subplot's title, not on it.
    fig.update_layout(legend=dict(y=1.1, yanchor="bottom", x=1.0, xanchor="right"), margin=dict(t=110))
    fig.update_annotations(yshift=4, font=dict(size=15))
    return fig


def cumulative_figure(runs: dict[str, RunTrace], upto: dict[str, int] | None = None, height: int = 360):
    """Tokens generated against each method's own compute time, all methods on one axis."""
    fig = go.Figure()
    any_points = False
    for method, run in runs.items():
        steps = run.steps[:(upto or {}).get(method, len(run.steps))]
        if not steps:
            continue
        any_points = True
        xs = [round(t, 4) for t in accumulate((s.total_ms / 1000 for s in steps), initial=0.0)]
        ys = [0] + [s.cumulative_tokens for s in steps]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=_esc(METHOD_LABELS.get(method, method)),
                                 line=dict(color=METHOD_COLORS.get(method), width=4, shape="hv")))
    if not any_points:
        return empty_figure("Tokens over time", "cumulative tokens appear here", height)
    fig = _base_layout(fig, "Tokens over time (steeper = faster)", height)
    fig.update_xaxes(title="seconds of the method's own compute", gridcolor="#eee", rangemode="tozero")
    fig.update_yaxes(title="tokens generated", gridcolor="#eee", rangemode="tozero")
    return fig


def forward_curve_figure(curve: dict, title: str = "Measured target forward time t(n)", height: int = 320,
                         floors: dict | None = None):
    """The measured cost of one target forward over n new tokens; with `floors` (n -> (bandwidth floor ms,
    arithmetic floor ms), `hardware.curve_floors`), the two floors this CPU's rates set beside it."""
    if not curve:
        return empty_figure(title, "no forward-time profile measured yet for this model pair "
                                   "(run once with 'auto' sizes)", height)
    ns = sorted(int(n) for n in curve)
    ms = [float(curve[n] if n in curve else curve[str(n)]) for n in ns]
    fig = go.Figure(go.Scatter(x=ns, y=ms, mode="lines+markers", line=dict(color="#1e3a8a", width=3),
                               hovertemplate="n=%{x}: %{y:.1f} ms<extra></extra>", name="t(n)"))
    at = [n for n in ns if n in (floors or {})]
    for index, (name, colour) in enumerate((("bytes read / bandwidth", "#059669"),
                                            ("int8 MACs / int8 peak", "#d97706"))):
        if at:
            fig.add_trace(go.Scatter(x=at, y=[floors[n][index] for n in at], mode="lines", name=name,
                                     line=dict(color=colour, width=2, dash="dash"),
                                     hovertemplate="n=%{x}: %{y:.1f} ms<extra>" + name + "</extra>"))
    fig = _base_layout(fig, title, height)
    fig.update_xaxes(type="log", title="new tokens in one forward (n)", gridcolor="#eee", tickvals=ns)
    fig.update_yaxes(title="ms", gridcolor="#eee", rangemode="tozero")
    return fig
