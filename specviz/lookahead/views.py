"""What the page says of a Lookahead run, from its trace alone (`Method.views`): the step-through caption (the
Jacobi window, the pool's candidates and how far each matched, what was harvested) and the tokens a step should
write at the run's own measured rates."""

from __future__ import annotations

from ..trace import ORIGIN_COPY, LookaheadPayload, RaceTrace, RunTrace
from ..ui.html import esc
from ..ui.measured import lookahead_tokens_per_step
from ..ui.narrate import MAX_LIST, emitted, finish, key_text, listed, prob, tok, token_texts

tokens_per_step = lookahead_tokens_per_step   # `Method.views`: the what-if panel's part-by-part row


def narrate(trace: RaceTrace, run: RunTrace, step: int, texts: dict[int, str] | None) -> str:
    rec = run.steps[step]
    p = rec.payload
    if not isinstance(p, LookaheadPayload):
        return f"One target forward over {esc(rec.tokens_processed)} token(s) gave {emitted(rec)}." + finish(rec)
    texts = texts if texts is not None else token_texts(trace)
    key = key_text(run, step, p.key_token_id)
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
        rows.append(f"<li>level {level}: {listed(shown, len(row) - MAX_LIST)}</li>")
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
                       f"{copied} after {keyname}: {listed(parts, len(p.candidates) - MAX_LIST)} (matched = leading "
                       f"tokens equal to what the target "
                       f"{'predicts' if trace.greedy else 'accepted: at each position the candidates offer their tokens in pool order, and each new one, x, is accepted with probability P′(x), the target probability P renormalised without the tokens rejected before it there (a guess is one-hot, q = 1, so min(1, P′/q) is P′)'}).")
            if not trace.greedy:
                out.append(_lookahead_tries(p))
            if p.accepted_candidate is not None and p.candidates[p.accepted_candidate].match_length > 0:
                best = p.candidates[p.accepted_candidate]
                out.append(f"<b>Accepted</b> candidate {esc(p.accepted_candidate)}: its first {esc(best.match_length)} "
                           f"token{'s' if best.match_length != 1 else ''} "
                           f"({listed([tok(t) for t in best.texts[:best.match_length]])}) plus the target's own "
                           f"next token.")
            else:
                out.append("None matched even one token: the target's own next token is the only one this step.")
    if p.harvested:
        shown = [" ".join([name(g[0]) + " →"] + [name(t) for t in g[1:]]) for g in p.harvested[:3]]
        out.append(f"{len(p.harvested)} new n-gram{'s' if len(p.harvested) != 1 else ''} (key → continuation) went "
                   f"into the pool, e.g. {'; '.join(shown)}; it now holds {esc(p.pool_size)}.")
    out.append(f"This step wrote {emitted(rec)} from one target forward.")
    return " ".join(out) + finish(rec)


def _lookahead_tries(p: LookaheadPayload) -> str:
    """The step's tries in the order they happened, with the probability and draw each was recorded with."""
    tries = []
    for j in range(max((len(c.tokens) for c in p.candidates), default=0)):
        for k, c in enumerate(p.candidates):
            if j < len(c.accept_probs) and c.accept_probs[j] is not None and c.uniforms[j] is not None:
                verdict = "accepted" if c.uniforms[j] < c.accept_probs[j] else "rejected"
                tries.append(f"position {j + 1}, {tok(c.texts[j])} (candidate {k}): P′ {prob(c.accept_probs[j])}, "
                             f"draw {prob(c.uniforms[j])}, {verdict}")
    if not tries:
        return ""
    return f"The tries: {listed(tries[:MAX_LIST], len(tries) - MAX_LIST)}."
