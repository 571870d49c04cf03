"""What the page says of an autoregressive run, from its trace alone (`Method.views`)."""

from __future__ import annotations

from ..trace import RaceTrace, RunTrace
from ..ui.narrate import finish, prob, tok


def narrate(trace: RaceTrace, run: RunTrace, step: int, texts: dict[int, str] | None) -> str:
    rec = run.steps[step]
    first = rec.new_token_texts[0] if rec.new_token_texts else ""
    what = ("read the whole prompt (prefill) and" if rec.tokens_processed > 1 else "read one token and")
    out = [f"One target forward {what} produced {tok(first)} — autoregressive decoding always gets exactly "
           f"one token per forward."]
    alts = rec.alternatives or []
    if alts:
        parts = []
        for a in alts:
            mark = " ✔" if a.get("id") in rec.new_token_ids[:1] else ""
            parts.append(f"{tok(a.get('text', ''))} p = {prob(float(a.get('p', 0.0)))}{mark}")
        how = ("greedy decoding takes the most likely one" if trace.greedy else
               f"at temperature {trace.temperature:g} the token is drawn at random from this distribution")
        out.append(f"The target's top alternatives: {', '.join(parts)} ({how}).")
    else:
        out.append("(This trace does not record the target's alternatives: it predates them.)")
    return " ".join(out) + finish(rec)
