"""What `auto` chose for a race, and why, in the summary line's words (issue 67, items 4 and 5).

Two kinds of sentence, both kept in the race's trace so a replay or a download says the same:

- why a size is small: where `auto` runs a one-level Sequoia tree (`sequoia.sizing.one_level_words`) or no
  Lookahead candidates (`lookahead_words`), what the measured t(n) and the draft's cost made it choose, from the
  very numbers the sizing chose by (its plan, or `lookahead.sizing.choose`'s result); in the run's
  settings["auto_why"];
- what changed since the last race: where a race's precision or `auto` sizes differ from those of the last race
  with the same settings (`race.measure_key`), which and why (`change_words`, from two `auto_state`s); the sizes'
  in the run's settings["auto_changed"], the precision's after its own words (`RaceTrace.precision_choice`).

`auto_state`, `change_words` and the sentence builders are pure: functions of trace and plan data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..methods import sized
from .precision import waits_for_measurement

SIZED = sized()
WHY = "auto_why"          # the run's settings key for why its `auto` size is small
CHANGED = "auto_changed"  # and for what `auto` changed since the last race with these settings
KEPT_STATES = 64          # the last races remembered (one per `measure_key`), the least recent dropped first


def lookahead_words(result: dict) -> str:
    """Why `auto` chose no Lookahead candidates from its pool (G = 0), from `lookahead.sizing.choose`'s result:
    t(1) and t(n) of the chosen forward, and of the best setting with pool candidates, its expected tokens per
    forward, and both predicted speedups. "" where the choice has pool candidates."""
    choice = result.get("choice") or {}
    if int(choice.get("guesses", 1) or 0) != 0 or not result.get("curve"):
        return ""
    curve = {int(k): float(v) for k, v in result["curve"].items()}
    t1 = curve[min(curve)]
    n = int(choice["step_tokens"])
    words = (f"auto chose no Lookahead candidates from its n-gram pool (G=0, W={choice['window']}, "
             f"N={choice['ngram']}): on this machine t(1) = {t1:.1f} ms and t({n}) = {float(choice['forward_ms']):.1f} ms")
    best = next((r for r in result.get("table") or [] if int(r.get("guesses", 0)) > 0), None)
    if best is None:
        return words + f": predicted {float(choice['predicted_speedup']):.2f}x"
    return words + (f", and the best setting with pool candidates, W={best['window']}, N={best['ngram']}, "
                    f"G={best['guesses']}, forwards {best['step_tokens']} tokens at t({best['step_tokens']}) = "
                    f"{float(best['forward_ms']):.1f} ms for {float(best['expected_tokens']):.2f} tokens expected "
                    f"per forward: predicted {float(best['predicted_speedup']):.2f}x against "
                    f"{float(choice['predicted_speedup']):.2f}x without pool candidates")


def _sizing(method: str, what: str):
    """A sized method's `auto_size_words(settings)` (the size `auto` ran, in words; None where it was asked for)
    or `AUTO_WHAT` (what that size is called), from its sizing module (`Method.sizing`)."""
    from .methods import sizing

    return sizing(method, what)


def auto_state(trace) -> dict:
    """What `auto` chose for the race: its precision (where `auto` chose it: `precision_choice` is set) and
    whether that still waited for this CPU's measurement, and each method's `auto` size and whether it was a
    first size. Small and plain, to be remembered until the next race."""
    state: dict = {}
    if trace.precision_choice:
        state["precision"] = {"name": trace.dtype, "waiting": waits_for_measurement(trace.precision_choice)}
    for method in SIZED:
        run = trace.runs.get(method)
        settings = (run.settings or {}) if run is not None else {}
        size = _sizing(method, "auto_size_words")(settings)
        if size is not None:
            state[method] = {"size": size, "first": settings.get("sizing") == "first"}
    return state


def change_words(before: dict | None, after: dict) -> dict[str, str]:
    """{"precision" | method: one sentence} for what `auto` chose differently from the race `before` (the last
    one with the same settings), and why; {} where nothing changed or there was no race before."""
    if not before:
        return {}
    out = {}
    old, new = before.get("precision"), after.get("precision")
    precision_changed = bool(old and new and old["name"] != new["name"])
    if precision_changed:
        why = ("this CPU's precisions were measured in between" if old["waiting"] and not new["waiting"]
               else "this CPU's precisions were measured again in between")
        out["precision"] = f"auto changed the precision from {old['name']} to {new['name']} since the last race " \
                           f"with these settings: {why}"
    for method in SIZED:
        old, new = before.get(method), after.get(method)
        if not old or not new or old["size"] == new["size"]:
            continue
        if precision_changed:
            why = (f"the precision changed from {before['precision']['name']} to {after['precision']['name']}, "
                   "and each precision's forward times are its own")
        elif old["first"] and not new["first"]:
            why = ("the last race started on first sizes while this machine's forward times were measured; these "
                   "are the measured sizes")
        elif old["first"] and new["first"]:
            why = ("both started on first sizes, each from its own quick estimate of this machine's forward times, "
                   "while the measurement for auto runs")
        elif new["first"]:
            why = "this machine's measurement for auto is running again, so this race started on first sizes"
        else:
            why = "this machine's forward times were measured again in between"
        out[method] = f"auto changed {_sizing(method, 'AUTO_WHAT')} from {old['size']} to {new['size']} since the last race with " \
                      f"these settings: {why}"
    return out


def why_words(method: str, settings: dict, lookahead_result: dict | None = None) -> str:
    """Why a run's `auto` size is small, where it is (a one-level tree, no Lookahead candidates), else ""."""
    if method == "sequoia" and settings.get("tree") == "auto" and isinstance(settings.get("plan"), dict):
        from .methods import sizing

        return sizing("sequoia", "one_level_words")(settings["plan"])
    if method == "lookahead" and settings.get("auto") and lookahead_result:
        choice = lookahead_result.get("choice") or {}
        if all(choice.get(k) == settings.get(k) for k in ("window", "ngram", "guesses")):   # the choice it ran
            return lookahead_words(lookahead_result)
    return ""


class LastRaces:
    """What `auto` chose at the last race of each set of settings (`race.measure_key`), for `change_words`;
    bounded (`KEPT_STATES`)."""

    def __init__(self, keep: int = KEPT_STATES):
        self.keep = keep
        self.states: OrderedDict = OrderedDict()
        self.lock = threading.Lock()   # races started in threads of one process share the pair cache

    def swap(self, key, state: dict) -> dict | None:
        """Remember `state` for `key`; return what was remembered before (None: no race with these settings)."""
        with self.lock:
            before = self.states.pop(key, None)
            self.states[key] = state
            while len(self.states) > self.keep:
                self.states.popitem(last=False)
            return before


def annotate(trace, pair, graphs, last: LastRaces | None, key) -> None:
    """Write the sentences into a race's trace as it starts: each sized run's `WHY` (Lookahead's from the choice
    `lookahead.sizing` cached, which it ran), and, against the last race with the same `key`, what `auto`
    changed (`CHANGED`; the precision's after its `precision_choice`). Measures nothing."""
    lookahead = trace.runs.get("lookahead")
    result = None
    if lookahead is not None and (lookahead.settings or {}).get("auto"):
        from .methods import sizing
        from .graphs import capture_wanted

        result = sizing("lookahead", "cached_choice")(pair, graphs=capture_wanted(graphs, pair.device))
    for method in SIZED:
        run = trace.runs.get(method)
        if run is not None and run.settings:
            words = why_words(method, run.settings, result)
            if words:
                run.settings[WHY] = words
    if last is None:
        return
    state = auto_state(trace)
    changes = change_words(last.swap(key, state), state)
    if "precision" in changes:
        trace.precision_choice = f"{trace.precision_choice}; {changes.pop('precision')}"
    for method, words in changes.items():
        trace.runs[method].settings[CHANGED] = words
