"""Narrated step-through: what one step of one method did, in words, from the trace alone.

Workshop mode (issue 14). Every sentence is computed from a `RaceTrace` (no model, no tokenizer), so an uploaded
trace replays with the captions the live run had. Each method narrates its own steps in its folder (its record's
`views` module: Sequoia's tree and walk, Lookahead's window and pool, autoregressive's alternatives); this module
holds the caption around them and the words they share (`tok`, `prob`, `listed`, `emitted`, `finish`).
"""

from __future__ import annotations

from ..methods import method_views
from ..trace import LookaheadPayload, RaceTrace, RunTrace, StepRecord, TreePayload
from .figures import METHOD_COLORS, METHOD_LABELS, _show, plural
from .html import esc
from .svg import short

MAX_LIST = 6   # at most this many tokens / candidates listed in one sentence


def plain_token(text: str | None, limit: int = 18) -> str:
    """The visible text of a token in a caption: whitespace drawn, cut to `limit` characters."""
    return short(_show(text or ""), limit)


def tok(text: str | None, limit: int = 18) -> str:
    """A token as the captions show it: whitespace visible, long ones shortened (full text on hover)."""
    shown, cut = _show(text or ""), plain_token(text, limit)
    title = f' title="{esc(shown)}"' if cut != shown else ""
    return f'<code class="sv-ctok"{title}>{esc(cut)}</code>'


def prob(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def listed(items: list[str], more: int = 0) -> str:
    text = ", ".join(items)
    return text + (f" and {more} more" if more > 0 else "")


def token_texts(trace: RaceTrace) -> dict[int, str]:
    """Every token id the trace shows a text for (steps, tree nodes, window cells, candidates)."""
    texts: dict[int, str] = {}
    for run in trace.runs.values():
        for rec in run.steps:
            texts.update(zip(rec.new_token_ids, rec.new_token_texts))
            p = rec.payload
            if isinstance(p, TreePayload):
                texts.update((n.token_id, n.text) for n in p.nodes)
            elif isinstance(p, LookaheadPayload):
                for ids, txts in zip(p.window, p.window_text or []):
                    texts.update(zip(ids, txts))
                for c in p.candidates:
                    texts.update(zip(c.tokens, c.texts))
    return texts


def key_text(run: RunTrace, upto: int, key_id: int, default: str | None = None) -> str | None:
    """The text of the key token a Lookahead pool entry follows: the last token `key_id` committed in `run`'s
    first `upto` steps, else `default`."""
    ids, texts = [], []
    for rec in run.steps[:upto]:
        ids += rec.new_token_ids
        texts += rec.new_token_texts
    for tok_id, text in zip(reversed(ids), reversed(texts)):
        if tok_id == key_id:
            return text
    return default


def emitted(rec: StepRecord) -> str:
    n = len(rec.new_token_ids)
    shown = [tok(t) for t in rec.new_token_texts[:MAX_LIST]]
    return f"{plural(n, 'token')} ({listed(shown, n - MAX_LIST)})" if n else "no token"


def finish(rec: StepRecord) -> str:
    if rec.finish_reason == "eos":
        return " The model wrote its end-of-text token: the run ends here."
    if rec.finish_reason == "length":
        return " That reached the max-new-tokens limit: the run ends here."
    return ""


# ----------------------------------------------------------------------------- one global step


def narrate_step(trace: RaceTrace, method: str, step: int, texts: dict[int, str] | None = None) -> str:
    """The caption (HTML) for step `step` of `method`'s run: the method's own narrator (its record's `views`
    module, `narrate(trace, run, step, texts)`; `texts`: the trace's token texts where the caller has them, else
    None and a narrator that needs them reads them), or what any step did."""
    run = trace.runs[method]
    views = method_views(method)
    if hasattr(views, "narrate"):
        return views.narrate(trace, run, step, texts)
    return f"{emitted(run.steps[step])}."


def racing_caption_html() -> str:
    """The caption while a race runs: the views show each method's latest step as it happens."""
    return ('<div class="sv-caption"><b>Racing…</b> The views show each method\'s latest step as it happens. '
            'When the race ends, step through it here with ◀ / ▶ or the arrow keys, one target forward at a '
            'time.</div>')


def caption_html(trace: RaceTrace | None, upto: int) -> str:
    """The step-through caption: which method ran global step `upto`, and what its step did."""
    if trace is None or not trace.order:
        return ('<div class="sv-caption">No run yet: start a race, pick a workshop preset, or upload a trace. '
                'Then step with ◀ / ▶ or the arrow keys.</div>')
    total = len(trace.order)
    if upto <= 0:
        return (f'<div class="sv-caption"><b>Step 0 of {total}</b>: before the first target forward. '
                f'Press ▶ Next (or the → key) to step through the race.</div>')
    method, step = trace.order[upto - 1]
    counts = trace.steps_done(upto)
    done = ", ".join(f"{esc(METHOD_LABELS.get(m, m))} {counts.get(m, 0)}" for m in trace.methods)
    label = METHOD_LABELS.get(method, method)
    color = METHOD_COLORS.get(method, "#111")
    mode = "greedy" if trace.greedy else f"sampling at temperature {trace.temperature:g}"
    try:
        story = narrate_step(trace, method, step)
    except (IndexError, KeyError, AttributeError, TypeError, ValueError) as exc:   # a malformed upload
        story = f"(this step cannot be narrated: {esc(str(exc))})"
    return (f'<div class="sv-caption"><div class="sv-caption-head"><b>Step {upto} of {total}</b>: '
            f'<span style="color:{color};font-weight:700">{esc(label)} ran its step {esc(step)}</span> ({mode}). '
            f'<span style="color:#6b7280">Steps so far — {done}.</span></div>'
            f'<div class="sv-caption-body" style="border-left:4px solid {color}">{story}</div></div>')

