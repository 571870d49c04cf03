"""What the page says of a Sequoia run, from its trace alone (`Method.views`): the step-through caption (the
tree the draft grew, the walk that verified it, each test's numbers) and the tokens a step should write at the
run's own measured acceptance."""

from __future__ import annotations

from ..trace import BUDGET_FROM_FREE_ROWS, ORIGIN_COPY, RaceTrace, RunTrace, TreePayload
from ..ui.figures import children, rejected_before
from ..ui.html import esc
from ..ui.measured import sequoia_tokens_per_step, tree_acceptance
from ..ui.narrate import MAX_LIST, emitted, finish, listed, prob, tok


def tokens_per_step(run: RunTrace) -> float | None:
    return sequoia_tokens_per_step(run, tree_acceptance(run))


def sequoia_walk(payload: TreePayload) -> dict:
    """The verification walk as the trace records it: accepted nodes, the first rejected node and
    the node where the walk stopped (the bonus token's parent)."""
    nodes = {n.id: n for n in payload.nodes}
    kids = children(payload)
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


def narrate(trace: RaceTrace, run: RunTrace, step: int, texts: dict[int, str] | None) -> str:
    """The step's tree, its walk and each test's numbers; an adaptive tree's shape explained (its threshold, and
    its node budget where that came from the target's measured forward times)."""
    settings = run.settings if isinstance(run.settings, dict) else {}
    threshold = settings.get("threshold") if settings.get("tree") == "adaptive" else None
    free_rows = settings.get("tree_budget") if settings.get("tree_budget_from") == BUDGET_FROM_FREE_ROWS else None
    greedy, rec = trace.greedy, run.steps[step]
    p = rec.payload
    if not isinstance(p, TreePayload) or not p.nodes:
        return (f"One target forward over {esc(rec.tokens_processed)} token(s) "
                f"({'the prompt: prefill, no tree yet' if rec.tokens_processed > 1 else 'no tree'}) gave "
                f"{emitted(rec)}." + finish(rec))
    out = []
    levels: dict[int, list] = {}
    for n in p.nodes:
        if n.parent >= 0:
            levels.setdefault(n.depth, []).append(n)
    if not levels:
        return (f"The tree is only its root {tok(p.nodes[0].text)} this step (no room left to speculate), so the "
                f"target forward gave {emitted(rec)}." + finish(rec))
    out.append(f"The draft grew a tree of {len(p.nodes)} nodes ({len(levels)} level"
               f"{'s' if len(levels) != 1 else ''}, one draft forward per level) after the last token "
               f"{tok(p.nodes[0].text)}:")
    items = []
    for depth in sorted(levels):
        row = levels[depth]
        shown = [f"{tok(n.text)} q {prob(n.draft_prob)}" for n in row[:MAX_LIST]]
        items.append(f"<li>level {depth}: {listed(shown, len(row) - MAX_LIST)}</li>")
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
                   f"last tokens occurred before, what followed them there ({listed([tok(n.text) for n in copied[:MAX_LIST]], len(copied) - MAX_LIST)}), "
                   "grafted where the draft stopped proposing it; a copy costs no draft forward, and its q is 1.")
    walk = sequoia_walk(p)
    path = walk["path"]
    after = rejected_before(p)
    out.append(f"One target forward checked all {len(p.nodes)} at once (tree attention).")
    if path:
        acc = [f"{tok(n.text)} (q {prob(n.draft_prob)}, P {prob(n.target_prob)}{_drawn(n)})" for n in path]
        rule = ("each was the target's own top choice" if greedy else
                "each accepted because its draw u fell below min(1, P/q), or, tested after a rejected sibling, "
                "below min(1, P′/q′) against the residual that sibling left")
        out.append(f"<b>Accepted</b> {len(path)}: {listed(acc)} — {rule}.")
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
                   f"q = {prob(node.draft_prob)} and target probability P = {prob(node.target_prob)}: {why}.")
        # Its later siblings, each tested against the residual the ones before it left.
        later = [c for c in walk["rejected_at_last"] if c is not node] if at is walk["last"] else []
        for c in later[:MAX_LIST]:
            why = ("not the target's top choice either" if greedy else _rejection(c, after.get(c.id, 0)))
            out.append(f"Then {tok(c.text)} (q = {prob(c.draft_prob)}, P = {prob(c.target_prob)}): {why}.")
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
    out.append(f"This step wrote {emitted(rec)} from one target forward.")
    return " ".join(out) + tests_table(p, greedy) + finish(rec)


def _drawn(node) -> str:
    """', accepted with probability a (draw u)' where the trace records the node's test."""
    if node.accept_prob is None or node.uniform is None:
        return ""
    return f"; probability {prob(node.accept_prob)}, draw {prob(node.uniform)}"


def _rejection(node, after: int) -> str:
    """Why a sampled node was rejected, with the numbers its test used (`TreeNode.accept_prob`...)."""
    if after == 0:
        a = node.accept_prob if node.accept_prob is not None else (
            min(1.0, node.target_prob / node.draft_prob) if node.draft_prob > 0 else 0.0)
        drew = f"its draw u = {prob(node.uniform)} was not below it" if node.uniform is not None else "the coin said no"
        return f"it is accepted only with probability min(1, P/q) = {prob(a)}, and {drew}"
    siblings = f"{after} rejected sibling{'s' if after != 1 else ''}"
    if node.accept_prob is None or node.tested_p is None:
        return (f"it was tested after {siblings}, against the residual they left, not against this P and q (this "
                "trace predates the record of each test's numbers)")
    return (f"it was tested after {siblings}, against the residual P′ = normalise(max(P − q, 0)) they left and the "
            f"renormalised q′: P′ = {prob(node.tested_p)}, q′ = {prob(node.tested_q)}, so min(1, P′/q′) = "
            f"{prob(node.accept_prob)}, and its draw u = {prob(node.uniform)} was not below it")


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
        bar = (f'<span class="sv-testbar" title="accepted when u &lt; {prob(n.accept_prob)}">'
               f'<span class="sv-testfill" style="width:{100 * n.accept_prob:.1f}%"></span>'
               f'<span class="sv-testdraw" style="left:{100 * n.uniform:.1f}%"></span></span>')
        rows.append(f"<tr><td>{tok(parent.text if parent else '')} → {tok(n.text)}</td><td>{prob(n.target_prob)}</td>"
                    f"<td>{prob(n.draft_prob)}</td><td>{against}</td><td>{prob(n.tested_p or 0.0)}</td>"
                    f"<td>{prob(n.tested_q or 0.0)}</td><td>{bar} {prob(n.accept_prob)}</td><td>{prob(n.uniform)}</td>"
                    f"<td>{mark} {esc(n.status)}</td></tr>")
    return ('<details class="sv-tests"><summary>The tests, sibling by sibling</summary><table>'
            "<tr><th>token</th><th>P</th><th>q</th><th>tested against</th><th>P′</th><th>q′</th>"
            "<th>min(1, P′/q′)</th><th>draw u</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
            "<p>A first child is tested against the node's own P and q; after a sibling is rejected, P becomes the "
            "residual normalise(max(P − q, 0)) and that sibling's token leaves q, which is renormalised. The bar is "
            "the acceptance probability, the mark the draw: accepted when the mark falls inside the bar.</p></details>")
