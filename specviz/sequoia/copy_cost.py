"""What a Sequoia step that verifies only a copied chain (prompt lookup, no draft forward) is predicted to gain,
priced from `auto`'s own plan (`sizing.plan_tree`: the target's curve, the fitted step costs), so the decoder
compares it with the plan's tree on the plan's terms. Pure: plan data in, numbers out."""

from __future__ import annotations

from ..engine.curve import Curve


def copy_step_speedup(plan: dict, reaches: list[float]) -> tuple[float, int]:
    """(the predicted speedup over `ar`, the length) of the best step that verifies only a copied chain, no draft
    forward: a chain of L tokens reached with probabilities `reaches[:L]` brings 1 + their sum tokens for the
    target's forward over 1 + L rows and the step's fixed costs (the plan's fitted `per_step`, `per_node`).
    Against the plan's own tree (`choice["predicted_speedup"]`), from the same curve and costs."""
    target = Curve(plan["target_ms"])
    costs = plan.get("step_costs") or {}
    ar_ms = float(plan["ar_ms_per_token"])
    best, length, tokens = 0.0, 0, 1.0
    per_step, per_node = float(costs.get("per_step", 0.0)), float(costs.get("per_node", 0.0))
    for k, reach in enumerate(reaches, 1):
        tokens += reach
        ms = target.at(1 + k) + per_step + per_node * (1 + k)
        if tokens * ar_ms / ms > best:
            best, length = tokens * ar_ms / ms, k
    return best, length
