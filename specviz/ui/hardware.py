"""The hardware-aware panel: the measured t_target(n) curve and the predicted-speedup tables behind 'auto'.

It never measures anything (that would stall the page): it shows what the trace recorded, else the plans the
optimisers cached on this machine for the trace's model pair (each sized method's, found through its `whatif`
module's `PLAN`), else says that nothing was measured yet.
"""

from __future__ import annotations

import json

from ..methods import whatifs
from ..trace import BUDGET_FROM_FREE_ROWS
from . import figures, html, svg
from .html import esc


def _device_type(device: str) -> str:
    return device.split(":")[0] if device else ""


def pair_key(trace) -> str:
    """The `ModelPair.key` a trace was recorded with: 'target|draft|device|dtype'."""
    return f"{trace.target_name}|{trace.draft_name}|{_device_type(trace.device)}|{trace.dtype}"


def _this_machine(data: dict) -> bool:
    """A plan measured on this CPU with this torch (any thread count: the page's server does not run the
    worker's threads); plans cached before fingerprints, or copied from elsewhere, are not shown."""
    import torch

    from ..engine.machine import cpu_model

    machine = data.get("machine")
    return isinstance(machine, dict) and machine.get("cpu") == cpu_model() and machine.get("torch") == torch.__version__


def _cached_plans(kind_prefix: str, key: str) -> list[dict]:
    from ..engine.profiler import cached_paths

    plans = []
    for path in cached_paths(kind_prefix, key):   # this pair's files only, not every plan on every click
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("key") == key and _this_machine(data):
            plans.append(data)
    return plans


def _recorded_plan(run) -> dict | None:
    """A plan the decoder stored in its settings (travels with an uploaded trace)."""
    settings = html.run_settings(run)
    for name in ("plan", "auto_plan", "auto"):
        value = settings.get(name)
        if isinstance(value, dict) and ("table" in value or "choice" in value):
            return value
    return None


def _matching(plans: list[dict], sampling: dict) -> dict | None:
    # Plans are kept per sampling mode, not per temperature (`sequoia.sizing._plan_key`): greedy or not.
    greedy = not float(sampling.get("temperature", 0.0) or 0.0)
    return next((plan for plan in plans if (not float(plan.get("temperature", 0.0) or 0.0)) == greedy),
                plans[0] if plans else None)


def plans_for(trace) -> dict[str, dict | None]:
    """{method: plan or None} for each method with a what-if column (`Method.whatif`), for the trace's pair and
    sampling; {} without a trace.

    A plan is the one the run recorded, else the one `auto` cached on this machine under the method's `PLAN`:
    per model pair (Sequoia's `sequoia.sizing.plan_tree`), or per target, device and dtype for a method with no
    draft (Lookahead's `lookahead.sizing.choose`).
    """
    if trace is None:
        return {}
    keys = {"pair": pair_key(trace), "target": f"{trace.target_name}|{_device_type(trace.device)}|{trace.dtype}"}
    out = {}
    for method, module in whatifs().items():
        prefix, keyed_by = module.PLAN
        plan = _recorded_plan(trace.runs.get(method))
        if plan is None:
            try:
                plan = _matching(_cached_plans(prefix, keys[keyed_by]), trace.sampling)
            except OSError:
                plan = None
        out[method] = plan
    return out


def _choice_row(plan: dict) -> dict:
    choice = plan.get("choice") or {}
    return {k: v for k, v in choice.items() if not isinstance(v, (list, dict))}


# The plans' field names, as a reader says them (table headers and the chosen size's line).
# In the glossary's words (specviz.glossary): Sequoia's `value` and Lookahead's `tokens_per_step` are the accepted
# length the plan expects, `step_tokens` the forward size.
FIELD_WORDS = {"budget": "tree budget", "depth": "tree depth", "value": "accepted length (expected)",
               "ms_per_step": "step time (ms)", "ms_per_token": "ms per token", "predicted_speedup": "predicted speedup",
               "window": "W (window)", "ngram": "N (n-gram)", "guesses": "G (guesses)",
               "tokens_per_step": "accepted length (expected)", "step_tokens": "forward size"}
# Fields that repeat another under a second name (the decoder's settings).
REPEATED_FIELDS = {"tree_budget": "budget", "tree_depth": "depth"}


def _choice_words(choice: dict) -> str:
    shown = {k: v for k, v in choice.items() if not (k in REPEATED_FIELDS and choice.get(REPEATED_FIELDS[k]) == v)}
    return ", ".join(f"{esc(FIELD_WORDS.get(k, k.replace('_', ' ')))} {html._fmt(v)}" for k, v in shown.items())


def _distinct_rows(rows: list[dict]) -> list[dict]:
    """Rows whose numbers are all the same but the depth limit are one tree (a budget of 8 cannot use 12
    levels): the shallowest limit stands for them."""
    seen, out = set(), []
    for row in sorted(rows, key=lambda r: (-float(r.get("predicted_speedup", 0) or 0), r.get("depth", 0))):
        key = tuple(sorted((k, str(v)) for k, v in row.items() if k != "depth"))
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _costs_html(costs: dict) -> str:
    """Sequoia's step costs beyond the forwards: why the predicted times are more than forward times."""
    terms = [f'<b>{float(costs.get("per_step", 0)):.1f} ms</b> (verification, caches, the trace)',
             f'<b>{float(costs.get("per_level", 0)):.1f} ms</b> per draft level']
    # A term the fit found to be nothing is left out rather than shown as 0.00 ms.
    for key, what in (("per_parent", "per node whose children are drawn"), ("per_node", "per node")):
        if float(costs.get(key, 0) or 0) >= 0.005:
            terms.append(f'<b>{float(costs[key]):.2f} ms</b> {what}')
    return ('<div style="color:#374151;margin:2px 0 6px">Beyond its forwards, a step also costs '
            + ", ".join(terms[:-1]) + " and " + terms[-1]
            + ': fitted from real steps on this machine, so deep or wide trees are not mistaken for free.'
            + _in_step_words(costs.get("in_step")) + '</div>')


def _in_step_words(in_step) -> str:
    """The tree's forward inside a step against the same forward alone (`StepCosts.in_step`), where it differs."""
    try:
        ratios = sorted((int(n), float(r)) for n, r in dict(in_step).items())
    except (TypeError, ValueError):
        return ""   # an uploaded trace's field is anything
    trees = [(n, r) for n, r in ratios if n > 1 and 0 < r < 10]
    if not trees or max(abs(r - 1) for _, r in trees) < 0.05:
        return ""
    shown = ", ".join(f"<b>{r:.2f}x</b> at {n} rows" for n, r in trees)
    return (f" Inside a step the target's forward over the tree took {shown} its time alone (the draft has just "
            "read its own weights between two target forwards, pushing some of the target's out of the cache): "
            "the plan prices it so.")


def _race_html(race: dict, chosen: str | None) -> str:
    """Sequoia's `auto` also races the DP tree against the adaptive tree here, and runs the faster."""
    won = "the adaptive tree" if chosen == "adaptive" else "the DP tree"
    return ('<div style="color:#374151;margin:2px 0 6px">The DP tree is optimal for the <i>average</i> acceptance; '
            'the adaptive tree is shaped each step by the draft\'s confidence' + _budget_note(race) + '. Raced on '
            f'{_runs(race)} on this machine: DP tree <b>{float(race["tree_tokens_per_s"]):.1f}'
            f'</b> tokens/s, adaptive tree <b>{float(race["adaptive_tokens_per_s"]):.1f}</b> tokens/s, so '
            f'<b>auto runs {won}</b> (the adaptive tree must be {float(race.get("margin", 1)):.2f}x faster).</div>')


def _runs(race: dict) -> str:
    """"6 prompts", or "6 prompts x 3 rounds" where a sampled race ran new seeds until it was settled."""
    prompts, rounds = int(race.get("prompts", 0)), int(race.get("rounds", 1))
    return f"{prompts} prompts" + (f" x {rounds} rounds" if rounds > 1 else "")


def _budget_note(race: dict) -> str:
    budget = race.get("adaptive_budget")
    if not budget or race.get("adaptive_budget_from") != BUDGET_FROM_FREE_ROWS:
        return ""
    return (f', within <b>{int(budget)} nodes</b>: the target reads that many here for about the price of one, '
            'and charges for every node past them')


def panel_html(plans: dict | None) -> str:
    intro = ('<div style="font-size:15px;margin-bottom:6px">With <b>auto</b> sizes, each method measures how long '
             'one target forward over <i>n</i> new tokens takes on <b>this</b> hardware, predicts tokens per '
             'forward for every size, and picks the size with the lowest predicted time per token. '
             'A GPU verifies 64 tokens almost as fast as 1; a CPU does not — so the choices differ.</div>')
    if not plans or not any(plans.values()):
        return intro + ('<div style="color:#6b7280">No measured plan for this model pair yet: run Sequoia or '
                        'Lookahead with <b>auto</b> sizes once and it appears here.</div>')
    parts = [intro]
    for method, plan in plans.items():
        if not plan:
            continue
        label = figures.METHOD_LABELS.get(method, method)
        choice = _choice_row(plan)
        if choice:
            # Sequoia's `auto` may run the adaptive tree instead of the DP tree it planned (the race below).
            verb = "planned (DP tree)" if plan.get("chosen") == "adaptive" else "chose"
            parts.append(f'<div style="font-size:16px;margin:6px 0"><b>{esc(label)} {verb}:</b> '
                         + _choice_words(choice) + "</div>")
        race = plan.get("race")
        if race:
            parts.append(_race_html(race, plan.get("chosen")))
        costs = plan.get("step_costs")
        if costs:
            parts.append(_costs_html(costs))
        rows = _distinct_rows(plan.get("table") or [])
        highlight = {k: choice[k] for k in ("budget", "depth", "window", "ngram", "guesses") if k in choice}
        parts.append(html.table_html(rows, f"{label}: predicted speedup, best first", highlight or None,
                                     labels=FIELD_WORDS))
    return "".join(parts)


def auto_notes_html(trace) -> str:
    """Under the summary line: why an `auto` size is small (a one-level tree, no Lookahead candidates) and what
    `auto` changed since the last race with the same settings, and why (`runtime.auto_notes`, kept in the runs'
    settings); "" where neither applies."""
    from ..runtime.auto_notes import CHANGED, SIZED, WHY

    if trace is None:
        return ""
    notes = []
    for method in SIZED:
        settings = html.run_settings(trace.runs.get(method))
        notes += [str(settings[key]) for key in (CHANGED, WHY) if isinstance(settings.get(key), str) and settings[key]]
    if not notes:
        return ""
    return ('<div class="sv-auto-notes" style="color:#6b7280;font-size:13px;margin-top:2px">'
            + "".join(f"<div>{esc(note)}.</div>" for note in notes) + "</div>")


def target_curve(plans: dict | None) -> dict[int, float]:
    """The target's t(n) from the first method's plan (`plans_for`) that holds one, read by its `whatif` module's
    `plan_curve`; {} without one."""
    return next((c for m, module in whatifs().items() if (c := module.plan_curve((plans or {}).get(m) or {}))), {})


FLOOR_CONTEXT = 200   # the context the curves are measured after (`profiler.forward_curve`)


def _recorded_floors(trace, curve: dict):
    """(rates, work) the trace recorded (`RaceTrace.floors`), or None where it has none, they do not read, or
    there is no curve to set them beside."""
    from ..engine import floors

    return floors.from_record(getattr(trace, "floors", None) or {}) if curve else None


def curve_floors(trace, curve: dict) -> dict:
    """n -> (bandwidth floor, arithmetic floor) ms at each size of `curve`; {} without recorded floors."""
    from ..engine import floors

    parsed = _recorded_floors(trace, curve)
    if parsed is None:
        return {}
    rates, work = parsed
    return {int(n): floors.floors_ms(work, rates, int(n), FLOOR_CONTEXT) for n in curve}


def floors_html(trace, curve: dict) -> str:
    """t(n) beside the floors at 1, 2, 4, 8 and 16 rows, with what was measured, in words."""
    from ..engine import floors

    parsed = _recorded_floors(trace, curve)
    if parsed is None:
        return ""
    rates, work = parsed
    rows = floors.floor_rows({int(n): ms for n, ms in curve.items()}, work, rates, FLOOR_CONTEXT)
    if not rows:
        return ""
    peak = f"an int8 peak of {rates.int8_gmacs:.0f} GMAC/s" if rates.int8_gmacs else "no int8 peak measured"
    words = (f"One forward reads {work.weight_bytes / 1e6:.0f} MB ({esc(work.weights)}) and does "
             f"{work.macs_per_token / 1e6:.0f} M multiply-accumulates per token; this machine read "
             f"{rates.bandwidth_gbs:.0f} GB/s and measured {peak} at {figures.plural(rates.threads, 'thread')}.")
    table = html.table_html([{"n": r["n"], "t(n) ms": r["t_ms"], "t(n) / t(1)": r["t_over_t1"],
                              "bandwidth floor ms": r["bandwidth_floor_ms"],
                              "arithmetic floor ms": r["arithmetic_floor_ms"], "bound": r["bound"],
                              "t(n) / higher floor": r["over_floor"]} for r in rows],
                            "t(n) against the two floors")
    return f'<div style="font-size:15px;margin:6px 0">{words}</div>' + table


def pays_html(trace) -> str:
    """Why Sequoia's race paid, or not, on this machine: Leviathan's speedup from the race's alpha, gamma and c,
    the same tokens priced at what this machine's step costs, and the race's own (`measured.why_it_pays`)."""
    from .measured import why_it_pays

    got = why_it_pays(trace)
    if got is None:
        return ""
    measured = got["measured_speedup"]
    rows = [
        {"": "Leviathan's formula (a chain; the verifying forward costs t(1), nothing else)",
         "accepted length": f"{got['chain_tokens']:.2f}", "step / t(1)": f"{got['leviathan_step_over_t1']:.2f}",
         "speedup": f"{got['leviathan_speedup']:.2f}x"},
        {"": f"the same tokens at this machine's step (t(n) = {got['verify_over_t1']:.2f} t(1), other work "
             f"{got['other_over_t1']:.2f} t(1))",
         "accepted length": f"{got['chain_tokens']:.2f}",
         "step / t(1)": f"{got['priced_step_over_t1']:.2f}",
         "speedup": f"{got['priced_speedup']:.2f}x"},
        {"": "the race (its tree, its steps)", "accepted length": f"{got['tokens_per_step']:.2f}",
         "step / t(1)": "", "speedup": f"{measured:.2f}x" if measured else "—"}]
    words = (f"Sequoia's race in Leviathan's terms: α = {got['alpha']:.2f} (of the levels a step tested, the share "
             f"where a drafted token was accepted: a chain's acceptance rate), γ = {got['gamma']:.1f} drafted levels "
             f"a step, draft-cost ratio c = {got['c']:.3f} (one draft level over autoregressive's step). Speedup = "
             "(1 − α^(γ+1)) / ((1 − α)(γc + 1)) if verifying γ tokens cost one forward; on a CPU it costs t(n), "
             "which the second row prices in. Over the same draft, the faster the target, the larger c and the less the "
             "same tree gains; beside a 4-bit target the draft runs on int8 kernels too, so c can move either way.")
    return (f'<div class="sv-pays" style="font-size:15px;margin:6px 0">{esc(words)}</div>'
            + html.table_html(rows, "Why it pays, or not, on this machine"))


def panel(trace):
    """(t_target(n) chart as SVG, panel HTML) for the trace's pair; nothing is measured here."""
    plans = plans_for(trace)
    curve = target_curve(plans)
    return (svg.forward_curve_svg(curve, floors=curve_floors(trace, curve)),
            pays_html(trace) + floors_html(trace, curve) + panel_html(plans))
