"""Everything one screen shows at one point of a race, from the `RaceTrace` alone.

`race_view(trace, upto)` is used both live (upto = all steps so far) and in
replay (upto = the slider), so the replay shows exactly what the live run showed.
"""

from __future__ import annotations

from ..methods import method_ids, raced_by_default
from ..trace import LookaheadPayload, RaceTrace, TreePayload
from . import html, narrate, svg

COLUMNS = method_ids()
DEFAULT_COLUMNS = raced_by_default()   # shown before any race; a race shows the methods it runs


def steps_done(trace: RaceTrace | None, upto: int | None) -> dict[str, int]:
    """Each method's steps done by global step `upto` (None: every step so far); {} without a trace."""
    if trace is None:
        return {}
    return trace.steps_done(len(trace.order) if upto is None else upto)


def first_payload(trace: RaceTrace | None, counts: dict[str, int], kind) -> tuple[object | None, int | None, str | None]:
    """The newest payload of `kind` of the first raced method that has one so far, its step and the method."""
    for m in (trace.methods if trace else ()):
        run = trace.runs.get(m)
        for rec in reversed(run.steps[:counts.get(m, 0)] if run is not None else []):
            if isinstance(rec.payload, kind):
                return rec.payload, rec.step, m
    return None, None, None


def text_views(trace: RaceTrace | None, upto: int | None = None, running: bool = False) -> dict:
    """Column headers and coloured texts (cheap: sent every step)."""
    counts = steps_done(trace, upto)
    out = {}
    for m in COLUMNS:
        run = trace.runs.get(m) if trace else None
        n = counts.get(m)
        raced = m in trace.methods if trace else m in DEFAULT_COLUMNS
        out[f"stats_{m}"] = html.stats_html(m, run, n, running, raced=raced)
        out[f"text_{m}"] = html.tokens_html(run, n)
    return out


def plot_views(trace: RaceTrace | None, upto: int | None = None, live: bool = False) -> dict:
    """Tree, window, pool, latency and race views as inline SVG/HTML (see svg.py for why not plotly).

    `live`: a race is streaming, so the latency strip shows only the latest steps.
    """
    counts = steps_done(trace, upto)
    # Each panel draws the first raced method that records its kind of payload: the tree panel Sequoia's (a
    # copied chain's where only prompt lookup speculates by trees), the window and pool panels Lookahead's.
    tree, tree_step, tree_method = first_payload(trace, counts, TreePayload)
    look, look_step, window_method = first_payload(trace, counts, LookaheadPayload)
    window_run = trace.runs.get(window_method) if window_method else None
    looked = counts.get(window_method, 0)
    runs = trace.runs if trace else {}
    # The text of the key token the pool entry follows (the last committed token before that step).
    key = narrate.key_text(window_run, looked, look.key_token_id, f"id {look.key_token_id}") if look else None
    return {
        "tree": svg.tree_svg(tree, tree_step, tree_method),
        "window": svg.window_html(look, look_step),
        "pool": html.pool_entry_html(look, key, html.most_used_ngrams(window_run, looked) if look else None),
        "pool_size": svg.pool_size_svg(window_run, looked),
        "latency": svg.latency_svg(runs, counts, live=live),
        "cumulative": svg.cumulative_svg(runs, counts),
    }
