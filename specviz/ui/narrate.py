"""Narrated step-through: what one step of one method did, in words, from the trace alone.

Workshop mode (issue 14). Every sentence here is computed from a `RaceTrace`
(no model, no tokenizer), so an uploaded trace replays with the same captions
the live run had:
- Sequoia: the tokens the draft proposed at each level (with q), the accepted
  path, the first rejected token with its draft probability q and target
  probability P and why it was rejected, and where the bonus token came from
  (at temperature > 0 the residual max(P - q, 0));
- Lookahead: what the window's levels held, which pool n-grams were verified and
  how far each matched, what went into the pool;
- autoregressive: the token and the target's top alternatives (when the trace
  records them: `StepRecord.alternatives`, added in issue 14; older traces say so).
"""

from __future__ import annotations

from ..trace import BUDGET_FROM_FREE_ROWS, ORIGIN_COPY, LookaheadPayload, RaceTrace, RunTrace, StepRecord, TreePayload
from .figures import METHOD_COLORS, METHOD_LABELS, _show, rejected_before
from .html import esc

MAX_LIST = 6   # at most this many tokens / candidates listed in one sentence


def plain_token(text: str | None, limit: int = 18) -> str:
    """The visible text of a token in a caption: whitespace drawn, cut to `limit` characters."""
    shown = _show(text or "")
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def tok(text: str | None, limit: int = 18) -> str:
    """A token as the captions show it: whitespace visible, long ones shortened (full text on hover)."""
    shown = _show(text or "")
    short = plain_token(text, limit)
    title = f' title="{esc(shown)}"' if short != shown else ""
    return f'<code class="sv-ctok"{title}>{esc(short)}</code>'


def _p(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def _list(items: list[str], more: int = 0) -> str:
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


def _emitted(rec: StepRecord) -> str:
    n = len(rec.new_token_ids)
    shown = [tok(t) for t in rec.new_token_texts[:MAX_LIST]]
    return f"{n} token{'s' if n != 1 else ''} ({_list(shown, n - MAX_LIST)})" if n else "no token"


def _finish(rec: StepRecord) -> str:
    if rec.finish_reason == "eos":
        return " The model wrote its end-of-text token: the run ends here."
    if rec.finish_reason == "length":
        return " That reached the max-new-tokens limit: the run ends here."
    return ""


# ----------------------------------------------------------------------------- autoregressive


def narrate_ar(rec: StepRecord, greedy: bool, temperature: float = 0.0) -> str:
    first = rec.new_token_texts[0] if rec.new_token_texts else ""
    what = ("read the whole prompt (prefill) and" if rec.tokens_processed > 1 else "read one token and")
    out = [f"One target forward {what} produced {tok(first)} — autoregressive decoding always gets exactly "
           f"one token per forward."]
    alts = rec.alternatives or []
    if alts:
        parts = []
        for a in alts:
            mark = " ✔" if a.get("id") in rec.new_token_ids[:1] else ""
            parts.append(f"{tok(a.get('text', ''))} p = {_p(float(a.get('p', 0.0)))}{mark}")
        how = ("greedy decoding takes the most likely one" if greedy else
               f"at temperature {temperature:g} the token is drawn at random from this distribution")
        out.append(f"The target's top alternatives: {', '.join(parts)} ({how}).")
    else:
        out.append("(This trace does not record the target's alternatives: it predates them.)")
    return " ".join(out) + _finish(rec)


# ----------------------------------------------------------------------------- Sequoia


def _children(payload: TreePayload) -> dict[int, list]:
    kids: dict[int, list] = {}
    for n in payload.nodes:
        if n.parent >= 0:
            kids.setdefault(n.parent, []).append(n)
    for v in kids.values():
        v.sort(key=lambda n: n.id)   # breadth-first ids: drawing order among siblings
    return kids


def sequoia_walk(payload: TreePayload) -> dict:
    """The verification walk as the trace records it: accepted nodes, the first rejected node and
    the node where the walk stopped (the bonus token's parent)."""
    nodes = {n.id: n for n in payload.nodes}
    kids = _children(payload)
    root = next((n for n in payload.nodes if n.parent < 0), None)
    path = [nodes[i] for i in payload.accepted_path if i in nodes]
    walk = [root] + path
    last = walk[-1] if walk and walk[-1] is not None else root
    rejected_at_last = [c for c in kids.get(last.id, []) if c.status == "rejected"] if last else []
    # The rejection that ended the walk (first child of the last accepted node turned down);
    # else the first rejection anywhere along it.
    first_rejected = (last, rejected_at_last[0]) if rejected_at_last else None
    if first_rejected is None:
        for at in walk:
            bad = [c for c in kids.get(at.id, []) if c.status == "rejected"]
            if bad:
                first_rejected = (at, bad[0])
                break
    return {"root": root, "path": path, "first_rejected": first_rejected, "last": last,
            "rejected_at_last": rejected_at_last, "leaf": last is not None and not kids.get(last.id)}


def narrate_sequoia(rec: StepRecord, greedy: bool, temperature: float = 0.0,
                    threshold: float | None = None, free_rows: int | None = None) -> str:
    """threshold: an adaptive tree's (its shape is explained), None for a fixed tree; free_rows: its node
    budget when that came from the target's measured forward times."""
    p = rec.payload
    if not isinstance(p, TreePayload) or not p.nodes:
        return (f"One target forward over {esc(rec.tokens_processed)} token(s) "
                f"({'the prompt: prefill, no tree yet' if rec.tokens_processed > 1 else 'no tree'}) gave "
                f"{_emitted(rec)}." + _finish(rec))
    out = []
    levels: dict[int, list] = {}
    for n in p.nodes:
        if n.parent >= 0:
            levels.setdefault(n.depth, []).append(n)
    if not levels:
        return (f"The tree is only its root {tok(p.nodes[0].text)} this step (no room left to speculate), so the "
                f"target forward gave {_emitted(rec)}." + _finish(rec))
    out.append(f"The draft grew a tree of {len(p.nodes)} nodes ({len(levels)} level"
               f"{'s' if len(levels) != 1 else ''}, one draft forward per level) after the last token "
               f"{tok(p.nodes[0].text)}:")
    items = []
    for depth in sorted(levels):
        row = levels[depth]
        shown = [f"{tok(n.text)} q {_p(n.draft_prob)}" for n in row[:MAX_LIST]]
        items.append(f"<li>level {depth}: {_list(shown, len(row) - MAX_LIST)}</li>")
    out.append(f'<ul class="sv-levels">{"".join(items)}</ul>')
    if threshold is not None:
        out.append(f"This tree's shape is this step's own (adaptive): a node got children while the product of "
                   f"the draft's ranked probabilities on its path (at temperature 1) stayed at least "
                   f"{threshold:g} (and the draft read another level only where it could pay for its cost), "
                   f"so where the draft is sure the tree grows deep, and where it hesitates it stays short and "
                   f"wide." + (f" It held at most {esc(free_rows)} nodes: this machine's target reads that many for "
                               f"about the price of one token, and charges for every node past them."
                               if free_rows else ""))
    if any(n.draft_input for n in p.nodes):
        # A draft with taps also read earlier layers at the root (`draft.feature_drafter.feature_input_label`).
        tapped = any("layers" in n.draft_input for n in p.nodes if n.depth == 1)
        root = ("the target's states at the root (its last layer's, and earlier layers' that still hold what the "
                "token after next needs)" if tapped else "the target's state at the root")
        out.append(f"This draft reads the target's own hidden state: level 1 came from {root}, deeper levels "
                   f"from the draft's predictions of the last layer's (hover a node), which is why they drift.")
    copied = [n for n in p.nodes if n.origin == ORIGIN_COPY]
    if copied:
        out.append(f"{len(copied)} token{'s' if len(copied) != 1 else ''} (ringed) "
                   f"{'were' if len(copied) != 1 else 'was'} copied from the text so far (prompt lookup): where its "
                   f"last tokens occurred before, what followed them there ({_list([tok(n.text) for n in copied[:MAX_LIST]], len(copied) - MAX_LIST)}), "
                   "grafted where the draft stopped proposing it; a copy costs no draft forward, and its q is 1.")
    walk = sequoia_walk(p)
    path = walk["path"]
    after = rejected_before(p)
    out.append(f"One target forward checked all {len(p.nodes)} at once (tree attention).")
    if path:
        acc = [f"{tok(n.text)} (q {_p(n.draft_prob)}, P {_p(n.target_prob)}{_drawn(n)})" for n in path]
        rule = ("each was the target's own top choice" if greedy else
                "each accepted because its draw u fell below min(1, P/q), or, tested after a rejected sibling, "
                "below min(1, P′/q′) against the residual that sibling left")
        out.append(f"<b>Accepted</b> {len(path)}: {_list(acc)} — {rule}.")
    else:
        out.append("<b>Accepted</b>: none of the first level's tokens.")
    first = walk["first_rejected"]
    if first is not None:
        at, node = first
        if greedy:
            top = (f" ({tok(p.bonus_text)})" if at is walk["last"] and p.bonus_token_id is not None else "")
            why = (f"the target's top choice there was a different token{top}, so greedy verification (accept "
                   "only the target's argmax) turned it down")
        else:
            why = _rejection(node, after.get(node.id, 0))
        out.append(f"<b>Rejected</b>: {tok(node.text)} after {tok(at.text)}, with draft probability "
                   f"q = {_p(node.draft_prob)} and target probability P = {_p(node.target_prob)}: {why}.")
        # Its later siblings, each tested against the residual the ones before it left.
        later = [c for c in walk["rejected_at_last"] if c is not node] if at is walk["last"] else []
        for c in later[:MAX_LIST]:
            why = ("not the target's top choice either" if greedy else _rejection(c, after.get(c.id, 0)))
            out.append(f"Then {tok(c.text)} (q = {_p(c.draft_prob)}, P = {_p(c.target_prob)}): {why}.")
    if p.bonus_token_id is not None:
        last = walk["last"]
        if greedy:
            where = "the target's own top choice after the accepted path"
        elif walk["rejected_at_last"]:
            k = len(walk["rejected_at_last"])
            where = (f"drawn from the <b>residual</b> left after {'its' if k == 1 else f'all {k} of its'} tested "
                     f"child{'ren' if k != 1 else ''} at {tok(last.text)} {'was' if k == 1 else 'were'} rejected "
                     "(each rejection replaced P by normalise(max(P − q, 0)) and took the token out of q) — what the "
                     "target wants beyond what the draft offered — which keeps the output distributed exactly as "
                     "the target's own sampling")
        else:
            where = (f"drawn from the target's own distribution P at {tok(last.text)}"
                     + (" (a leaf of the tree: nothing left to test)" if walk["leaf"] else ""))
        out.append(f"<b>Bonus</b> token {tok(p.bonus_text)}: {where}.")
    out.append(f"This step wrote {_emitted(rec)} from one target forward.")
    return " ".join(out) + tests_table(p, greedy) + _finish(rec)


def _drawn(node) -> str:
    """', accepted with probability a (draw u)' where the trace records the node's test."""
    if node.accept_prob is None or node.uniform is None:
        return ""
    return f"; probability {_p(node.accept_prob)}, draw {_p(node.uniform)}"


def _rejection(node, after: int) -> str:
    """Why a sampled node was rejected, with the numbers its test used (`TreeNode.accept_prob`...)."""
    if after == 0:
        a = node.accept_prob if node.accept_prob is not None else (
            min(1.0, node.target_prob / node.draft_prob) if node.draft_prob > 0 else 0.0)
        drew = f"its draw u = {_p(node.uniform)} was not below it" if node.uniform is not None else "the coin said no"
        return f"it is accepted only with probability min(1, P/q) = {_p(a)}, and {drew}"
    siblings = f"{after} rejected sibling{'s' if after != 1 else ''}"
    if node.accept_prob is None or node.tested_p is None:
        return (f"it was tested after {siblings}, against the residual they left, not against this P and q (this "
                "trace predates the record of each test's numbers)")
    return (f"it was tested after {siblings}, against the residual P′ = normalise(max(P − q, 0)) they left and the "
            f"renormalised q′: P′ = {_p(node.tested_p)}, q′ = {_p(node.tested_q)}, so min(1, P′/q′) = "
            f"{_p(node.accept_prob)}, and its draw u = {_p(node.uniform)} was not below it")


def tests_table(p: TreePayload, greedy: bool) -> str:
    """The step's tests sibling by sibling, in walk order: P and q at the parent, the P′ and q′ the test saw
    (the residual after earlier siblings' rejections), the acceptance probability as a bar with the draw
    marked on it, and the verdict. Sampled steps whose trace records the tests only."""
    tested = sorted((n for n in p.nodes if n.accept_prob is not None and n.uniform is not None),
                    key=lambda n: (n.depth, n.id))
    if greedy or not tested:
        return ""
    after = rejected_before(p)
    by_id = {n.id: n for n in p.nodes}
    rows = []
    for n in tested:
        parent = by_id.get(n.parent)
        against = "P, q" if after.get(n.id, 0) == 0 else "residual P′, q′"
        mark = "✓" if n.status == "accepted" else "✗"
        bar = (f'<span class="sv-testbar" title="accepted when u &lt; {_p(n.accept_prob)}">'
               f'<span class="sv-testfill" style="width:{100 * n.accept_prob:.1f}%"></span>'
               f'<span class="sv-testdraw" style="left:{100 * n.uniform:.1f}%"></span></span>')
        rows.append(f"<tr><td>{tok(parent.text if parent else '')} → {tok(n.text)}</td><td>{_p(n.target_prob)}</td>"
                    f"<td>{_p(n.draft_prob)}</td><td>{against}</td><td>{_p(n.tested_p or 0.0)}</td>"
                    f"<td>{_p(n.tested_q or 0.0)}</td><td>{bar} {_p(n.accept_prob)}</td><td>{_p(n.uniform)}</td>"
                    f"<td>{mark} {esc(n.status)}</td></tr>")
    return ('<details class="sv-tests"><summary>The tests, sibling by sibling</summary><table>'
            "<tr><th>token</th><th>P</th><th>q</th><th>tested against</th><th>P′</th><th>q′</th>"
            "<th>min(1, P′/q′)</th><th>draw u</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
            "<p>A first child is tested against the node's own P and q; after a sibling is rejected, P becomes the "
            "residual normalise(max(P − q, 0)) and that sibling's token leaves q, which is renormalised. The bar is "
            "the acceptance probability, the mark the draw: accepted when the mark falls inside the bar.</p></details>")


# ----------------------------------------------------------------------------- Lookahead


def narrate_lookahead(rec: StepRecord, greedy: bool, texts: dict[int, str], key: str | None = None) -> str:
    p = rec.payload
    if not isinstance(p, LookaheadPayload):
        return f"One target forward over {esc(rec.tokens_processed)} token(s) gave {_emitted(rec)}." + _finish(rec)
    name = lambda t: tok(texts.get(t, f"#{t}"))   # noqa: E731
    out = []
    levels = len(p.window)
    if p.warmup:
        out.append(f"<b>Warm-up</b>: the Jacobi window is still filling its {levels} level"
                   f"{'s' if levels != 1 else ''} (N = {esc(p.ngram_size or levels + 1)}); no n-gram is verified yet, "
                   f"so this forward yields one token like autoregressive decoding.")
    rows = []
    for level, row in enumerate(p.window_text or []):
        shown = [tok(t, 10) for t in row[:MAX_LIST]]
        rows.append(f"<li>level {level}: {_list(shown, len(row) - MAX_LIST)}</li>")
    if rows:
        out.append(f"The window (W = {esc(p.window_size or max(len(r) for r in p.window))}) now holds, per future "
                   f"position, a trajectory of guesses; the bottom level is this forward's newest guess:"
                   f'<ul class="sv-levels">{"".join(rows)}</ul>')
    keyname = tok(key) if key is not None else name(p.key_token_id)
    if not p.warmup:
        if not p.candidates:
            out.append(f"The pool had no n-gram starting after {keyname}, so nothing was verified.")
        else:
            parts = [f"{tok(''.join(c.texts), 24)} matched {esc(c.match_length)}" for c in p.candidates[:MAX_LIST]]
            n_copied = sum(c.origin == ORIGIN_COPY for c in p.candidates)
            copied = (f" ({n_copied} copied from the text so far, where its last tokens occurred before: prompt "
                      "lookup)" if n_copied else "")
            out.append(f"The pool offered {len(p.candidates)} n-gram candidate{'s' if len(p.candidates) != 1 else ''}"
                       f"{copied} after {keyname}: {_list(parts, len(p.candidates) - MAX_LIST)} (matched = leading "
                       f"tokens equal to what the target "
                       f"{'predicts' if greedy else 'accepted: at each position the candidates offer their tokens in pool order, and each new one, x, is accepted with probability P′(x), the target probability P renormalised without the tokens rejected before it there (a guess is one-hot, q = 1, so min(1, P′/q) is P′)'}).")
            if not greedy:
                out.append(_lookahead_tries(p))
            if p.accepted_candidate is not None and p.candidates[p.accepted_candidate].match_length > 0:
                best = p.candidates[p.accepted_candidate]
                out.append(f"<b>Accepted</b> candidate {esc(p.accepted_candidate)}: its first {esc(best.match_length)} "
                           f"token{'s' if best.match_length != 1 else ''} "
                           f"({_list([tok(t) for t in best.texts[:best.match_length]])}) plus the target's own "
                           f"next token.")
            else:
                out.append("None matched even one token: the target's own next token is the only one this step.")
    if p.harvested:
        shown = [" ".join([name(g[0]) + " →"] + [name(t) for t in g[1:]]) for g in p.harvested[:3]]
        out.append(f"{len(p.harvested)} new n-gram{'s' if len(p.harvested) != 1 else ''} (key → continuation) went "
                   f"into the pool, e.g. {'; '.join(shown)}; it now holds {esc(p.pool_size)}.")
    out.append(f"This step wrote {_emitted(rec)} from one target forward.")
    return " ".join(out) + _finish(rec)


def _lookahead_tries(p: LookaheadPayload) -> str:
    """The step's tries in the order they happened, with the probability and draw each was recorded with."""
    tries = []
    for j in range(max((len(c.tokens) for c in p.candidates), default=0)):
        for k, c in enumerate(p.candidates):
            if j < len(c.accept_probs) and c.accept_probs[j] is not None and c.uniforms[j] is not None:
                verdict = "accepted" if c.uniforms[j] < c.accept_probs[j] else "rejected"
                tries.append(f"position {j + 1}, {tok(c.texts[j])} (candidate {k}): P′ {_p(c.accept_probs[j])}, "
                             f"draw {_p(c.uniforms[j])}, {verdict}")
    if not tries:
        return ""
    return f"The tries: {_list(tries[:MAX_LIST], len(tries) - MAX_LIST)}."


# ----------------------------------------------------------------------------- one global step


def _key_before(run: RunTrace, step: int, key_id: int) -> str | None:
    ids, texts = [], []
    for rec in run.steps[:step]:
        ids += rec.new_token_ids
        texts += rec.new_token_texts
    for t, x in zip(reversed(ids), reversed(texts)):
        if t == key_id:
            return x
    return None


def narrate_step(trace: RaceTrace, method: str, step: int, texts: dict[int, str] | None = None) -> str:
    """The caption (HTML) for step `step` of `method`'s run."""
    run = trace.runs[method]
    rec = run.steps[step]
    temperature = float(trace.sampling.get("temperature", 0.0) or 0.0)
    greedy = trace.greedy
    if method == "ar":
        return narrate_ar(rec, greedy, temperature)
    if method == "sequoia":
        settings = run.settings if isinstance(run.settings, dict) else {}
        threshold = settings.get("threshold") if settings.get("tree") == "adaptive" else None
        free_rows = settings.get("tree_budget") if settings.get("tree_budget_from") == BUDGET_FROM_FREE_ROWS else None
        return narrate_sequoia(rec, greedy, temperature, threshold, free_rows)
    if method == "lookahead":
        key = None
        if isinstance(rec.payload, LookaheadPayload):
            key = _key_before(run, step, rec.payload.key_token_id)
        return narrate_lookahead(rec, greedy, texts if texts is not None else token_texts(trace), key)
    if isinstance(rec.payload, TreePayload):   # a copied chain (prompt lookup)
        return narrate_copy_chain(rec, greedy)
    return f"{_emitted(rec)}."


def narrate_copy_chain(rec: StepRecord, greedy: bool) -> str:
    """A step that verified a chain copied from the text: no draft, one forward over the chain."""
    p = rec.payload
    copied = [n for n in p.nodes if n.parent >= 0]
    accepted = [n for n in copied if n.status == "accepted"]
    rejected = next((n for n in copied if n.status == "rejected"), None)
    rule = ("each is kept while it equals the target's own choice" if greedy else
            "each is kept with probability P (its q is one-hot), and the first one refused is redrawn from P "
            "without it, so the text follows the target's distribution exactly")
    out = [f"Where the text's last tokens occurred before, it went on with {_list([tok(n.text) for n in copied])}: "
           f"copied as {len(copied)} guess{'es' if len(copied) != 1 else ''} and checked in one target forward of "
           f"{rec.tokens_processed} rows ({rule})."]
    if accepted:
        out.append(f"The target accepted {len(accepted)}: {_list([tok(n.text) for n in accepted])}.")
    if rejected is not None:
        out.append(f"It refused {tok(rejected.text)} (its P = {_p(rejected.target_prob)}) and wrote "
                   f"{tok(p.bonus_text)} instead.")
    else:
        out.append(f"Every copied token held, and the forward's last row added {tok(p.bonus_text)}.")
    return " ".join(out) + _finish(rec)


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
    mode = "greedy" if trace.greedy else f"sampling at temperature {float(trace.sampling.get('temperature', 0)):g}"
    try:
        story = narrate_step(trace, method, step)
    except (IndexError, KeyError, AttributeError, TypeError, ValueError) as exc:   # a malformed upload
        story = f"(this step cannot be narrated: {esc(str(exc))})"
    return (f'<div class="sv-caption"><div class="sv-caption-head"><b>Step {upto} of {total}</b>: '
            f'<span style="color:{color};font-weight:700">{esc(label)} ran its step {esc(step)}</span> ({mode}). '
            f'<span style="color:#6b7280">Steps so far — {done}.</span></div>'
            f'<div class="sv-caption-body" style="border-left:4px solid {color}">{story}</div></div>')


CAPTION_CSS = """
.sv-caption { font-size: 16px; line-height: 1.55; }
.sv-caption-body { padding: 4px 0 4px 12px; margin-top: 4px; overflow-wrap: anywhere; }
.sv-caption ul.sv-levels { margin: 2px 0 4px 18px; padding: 0; }
code.sv-ctok { background: #f3f4f6; border: 1px solid #e5e7eb; border-radius: 4px; padding: 0 4px;
  font-family: ui-monospace, monospace; white-space: pre; }
.sv-caption b { color: #111827; }
.sv-tests table { border-collapse: collapse; font-size: 14px; margin: 4px 0; }
.sv-tests td, .sv-tests th { padding: 1px 6px; border-bottom: 1px solid #e5e7eb; text-align: left; }
.sv-testbar { position: relative; display: inline-block; width: 80px; height: 10px; background: #fee2e2;
  vertical-align: middle; }
.sv-testfill { position: absolute; left: 0; top: 0; bottom: 0; background: #86efac; }
.sv-testdraw { position: absolute; top: -3px; bottom: -3px; width: 2px; background: #111827; }
"""
__all__ = ["caption_html", "narrate_step", "narrate_ar", "narrate_sequoia", "narrate_lookahead", "token_texts",
           "sequoia_walk", "tests_table"]
