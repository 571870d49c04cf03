"""What the page says of a prompt-lookup run, from its trace alone (`Method.views`)."""

from __future__ import annotations

from ..trace import RaceTrace, RunTrace, TreePayload
from ..ui.narrate import emitted, finish, listed, prob, tok


def narrate(trace: RaceTrace, run: RunTrace, step: int, texts: dict[int, str] | None) -> str:
    """A step that verified a chain copied from the text: no draft, one forward over the chain."""
    rec = run.steps[step]
    p = rec.payload
    if not isinstance(p, TreePayload):   # no chain was copied
        return f"{emitted(rec)}."
    copied = [n for n in p.nodes if n.parent >= 0]
    accepted = [n for n in copied if n.status == "accepted"]
    rejected = next((n for n in copied if n.status == "rejected"), None)
    rule = ("each is kept while it equals the target's own choice" if trace.greedy else
            "each is kept with probability P (its q is one-hot), and the first one refused is redrawn from P "
            "without it, so the text follows the target's distribution exactly")
    out = [f"Where the text's last tokens occurred before, it went on with {listed([tok(n.text) for n in copied])}: "
           f"copied as {len(copied)} guess{'es' if len(copied) != 1 else ''} and checked in one target forward of "
           f"{rec.tokens_processed} rows ({rule})."]
    if accepted:
        out.append(f"The target accepted {len(accepted)}: {listed([tok(n.text) for n in accepted])}.")
    if rejected is not None:
        out.append(f"It refused {tok(rejected.text)} (its P = {prob(rejected.target_prob)}) and wrote "
                   f"{tok(p.bonus_text)} instead.")
    else:
        out.append(f"Every copied token held, and the forward's last row added {tok(p.bonus_text)}.")
    return " ".join(out) + finish(rec)
