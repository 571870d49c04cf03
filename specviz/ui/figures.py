"""What every view draws with: the methods' and statuses' colours, the labels' text, the tree's layout and the
window's grid; and the two plotly figures only the notebook shows (the acceptance vector, a planned tree).

The race's views themselves are `svg.py`'s, in the page, in replay and in the notebook alike: one renderer
per view, so the lesson's figures cannot disagree with the page's. Pure functions, no model, no gradio.
"""

from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from ..methods import colours, labels
from ..trace import PHASE_DRAFT, PHASE_TARGET, PHASE_VERIFY, LookaheadPayload, TreePayload

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


def _show(text: str) -> str:
    """Token text made visible: spaces and newlines drawn, never blank."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·")
    return shown if shown else "∅"


def plural(n: int, word: str) -> str:
    """'1 token', '2 tokens'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


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


def children(payload: TreePayload) -> dict[int, list]:
    """Parent id -> its child nodes, in id order (breadth-first ids: the drawing and testing order among
    siblings)."""
    kids: dict[int, list] = {}
    for n in sorted(payload.nodes, key=lambda n: n.id):
        if n.parent >= 0:
            kids.setdefault(n.parent, []).append(n)
    return kids


def rejected_before(payload: TreePayload) -> dict[int, int]:
    """Node id -> how many of its earlier siblings were tested and rejected: a node after one or more was
    tested against the residual they left, not against its own P and q."""
    count: dict[int, int] = {}
    for siblings in children(payload).values():
        seen = 0
        for n in siblings:
            count[n.id], seen = seen, seen + (n.status == "rejected")
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
        rule = (f"after {plural(after, 'rejected sibling')}, against the residual: "
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
