"""What a Sequoia step that verifies only a copied chain (prompt lookup, no draft forward) is predicted to gain,
priced from `auto`'s own plan (`sizing.plan_tree`: the target's curve, the fitted step costs), so the decoder
compares it with the plan's tree on the plan's terms. Pure: plan data in, numbers out."""

from __future__ import annotations

from ..engine.curve import Curve

# The plan's tokens per step weighs as this many of a run's own drafted steps (`tree_speedup_at`).
PRIOR_STEPS = 4


class CopyPricing:
    """A plan's terms for a copy-only step, read out of the plan once per run (a step only prices its reaches)."""

    def __init__(self, plan: dict):
        costs = plan.get("step_costs") or {}
        self.target = Curve(plan["target_ms"])
        self.ar_ms = float(plan["ar_ms_per_token"])
        self.per_step, self.per_node = float(costs.get("per_step", 0.0)), float(costs.get("per_node", 0.0))
        self.tree_speedup = float(plan["choice"]["predicted_speedup"])   # the plan's own tree, to beat
        self.tree_tokens = float(plan["choice"].get("value") or 0.0)      # ... at the tokens a step it predicts

    def tree_speedup_at(self, drafted_steps: int, drafted_tokens: int) -> float:
        """The plan's tree's predicted speedup with its tokens per step replaced by what this run's drafted steps
        brought (the plan's own figure weighing as `PRIOR_STEPS` steps); its step's cost stays the plan's. The plan
        prices the tree at the shipped acceptance, which a rewrite's text falls short of and a sum's exceeds: a copy
        then has the bar of the tree as this text drafts it."""
        if self.tree_tokens <= 0:   # a plan that does not say (a pinned one from before): its own figure
            return self.tree_speedup
        tokens = (self.tree_tokens * PRIOR_STEPS + drafted_tokens) / (PRIOR_STEPS + drafted_steps)
        return self.tree_speedup * tokens / self.tree_tokens

    def best_step(self, reaches: list[float]) -> tuple[float, int]:
        """(the predicted speedup over `ar`, the length) of the best step that verifies only a copied chain, no
        draft forward: a chain of L tokens reached with probabilities `reaches[:L]` brings 1 + their sum tokens
        for the target's forward over 1 + L rows and the step's fixed costs (the plan's fitted `per_step`,
        `per_node`), from the same curve and costs as the plan's tree (`tree_speedup`)."""
        best, length, tokens = 0.0, 0, 1.0
        for k, reach in enumerate(reaches, 1):
            tokens += reach
            speedup = tokens * self.ar_ms / (self.target.at(1 + k) + self.per_step + self.per_node * (1 + k))
            if speedup > best:
                best, length = speedup, k
        return best, length
