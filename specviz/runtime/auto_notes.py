"""What `auto` chose for a race, and why, in the summary line's words (issue 67, items 4 and 5).

Two kinds of sentence, both kept in the race's trace so a replay or a download says the same:

- why a size is small: where `auto` runs a one-level Sequoia tree or no Lookahead candidates, what the measured
  t(n) and the draft's cost made it choose, from the very numbers the sizing chose by (each sized method's
  `why_small`, in its sizing module); in the run's settings["auto_why"];
- what changed since the last race: where a race's precision or `auto` sizes differ from those of the last race
  with the same settings (`race.measure_key`), which and why (`change_words`, from two `auto_state`s); the sizes'
  in the run's settings["auto_changed"], the precision's after its own words (`RaceTrace.precision_choice`).

`auto_state`, `change_words` and the sentence builders are pure: functions of trace and plan data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..engine.methods import sizing
from ..engine.precision import waits_for_measurement
from ..methods import sized

SIZED = sized()
WHY = "auto_why"          # the run's settings key for why its `auto` size is small
CHANGED = "auto_changed"  # and for what `auto` changed since the last race with these settings
KEPT_STATES = 64          # the last races remembered (one per `measure_key`), the least recent dropped first


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
        size = sizing(method, "auto_size_words")(settings)
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
        out[method] = f"auto changed {sizing(method, 'AUTO_WHAT')} from {old['size']} to {new['size']} since the last race with " \
                      f"these settings: {why}"
    return out


class LastRaces:
    """What `auto` chose at the last race of each set of settings (`race.measure_key`), for `change_words`;
    bounded (`KEPT_STATES`)."""

    def __init__(self):
        self.states: OrderedDict = OrderedDict()
        self.lock = threading.Lock()   # races started in threads of one process share the pair cache

    def swap(self, key, state: dict) -> dict | None:
        """Remember `state` for `key`; return what was remembered before (None: no race with these settings)."""
        with self.lock:
            before = self.states.pop(key, None)
            self.states[key] = state
            while len(self.states) > KEPT_STATES:
                self.states.popitem(last=False)
            return before


def annotate(trace, pair, graphs, last: LastRaces | None, key) -> None:
    """Write the sentences into a race's trace as it starts: each sized run's `WHY` (its sizing's `why_small`:
    why the size `auto` ran is small, from the numbers it chose by), and, against the last race with the same
    `key`, what `auto` changed (`CHANGED`; the precision's after its `precision_choice`). Measures nothing."""
    from ..engine.graphs import capture_wanted

    captured = capture_wanted(graphs, pair.device) if pair is not None else False   # None: a trace alone
    for method in SIZED:
        run = trace.runs.get(method)
        if run is not None and run.settings:
            words = sizing(method, "why_small")(pair, captured, run.settings)
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
