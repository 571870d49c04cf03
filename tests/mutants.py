"""Plausible bugs in the exactness core, each a one-line rewrite of one function's source.

The negative controls (`test_sampling_controls.py`) run a decoder with one of these planted and check
that the chi-square test rejects it; `scripts/mutation_check.py` runs the exactness tests under each and
checks that at least one fails. A mutant names its target by module and function (`Class.method` for a
method) plus the exact source text it replaces, so after a refactor it is re-pointed by editing those
strings; `mutated()` fails loudly when the text is no longer there rather than testing nothing.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    module: str        # where the function is defined
    function: str      # "name" or "Class.method"
    old: str           # source text that must occur exactly once in the function (a method's dedented)
    new: str
    bug: str           # what the planted bug is, in words


MUTANTS = [
    Mutant("no-residual", "specviz.sequoia.verify", "sampled_walk",
           "            p = torch.where(miss, residual(p, q), p)\n", "",
           "a rejected child leaves P as it was: no residual normalise(max(P - q, 0))"),
    Mutant("rejected-left-in-q", "specviz.sequoia.verify", "sampled_walk",
           "            q = torch.where(miss, q.index_fill(0, tok, 0.0), q)\n", "",
           "a rejected child's token keeps its draft mass in q for its siblings"),
    Mutant("bonus-from-raw-target", "specviz.sequoia.verify", "sampled_walk",
           "race_sample(p, generator)", "race_sample(target_probs.index_select(0, cur.view(1))[0], generator)",
           "the bonus token is drawn from the target's P at the last node, not the residual"),
    Mutant("host-walk-wrong-child", "specviz.sequoia.verify", "greedy_walk_on_host",
           "if tokens[c] == picks[node]", "if tokens[c] != picks[node]",
           "the greedy walk a CPU follows on the host accepts a child the target did not choose"),
    Mutant("host-verdict-off-by-one", "specviz.lookahead.verify", "greedy_verdict_on_host",
           "expected = [first_pred] + list(preds[:-1])", "expected = list(preds)",
           "the greedy verdict a CPU follows on the host checks each candidate token against the target's choice "
           "one position later"),
    Mutant("tree-positions-off-by-one", "specviz.sequoia.decoder", "_Tree.__init__",
           "position_offsets=shape.depths,", "position_offsets=[d + 1 for d in shape.depths],",
           "every tree node sits one position too far from the root in the target's forward"),
    Mutant("tree-mask-skips-self", "specviz.sequoia.tree", "TreeShape.ancestor_matrix",
           "        row[i] = True\n", "        row[max(i - 1, 0)] = True\n",
           "a tree node attends to the node before it instead of itself (off by one in the mask)"),
    Mutant("kv-keeps-rejected-slot", "specviz.sequoia.decoder", "SequoiaDecoder._verify",
           "self.target.keep(root_slot, walk.path + root_slot)",
           "self.target.keep(root_slot, self.arange[:walk.path.numel()] + root_slot)",
           "cache compaction keeps the first len(path) tree slots, rejected siblings included"),
    Mutant("race-sample-flattened", "specviz.draws", "race_sample",
           "(probs.float() / exponential_like(probs.float(), generator))",
           "(probs.float() / exponential_like(probs.float(), generator).sqrt())",
           "the static steps' sync-free sampler races clocks of the wrong law (Exp(1) squashed by a square root)"),
    Mutant("copy-accepted-outright", "specviz.sequoia.decoder", "SequoiaDecoder._graft",
           "self.draft_q[holders, self.tokens.new_tensor(chain)] = 1.0",
           "self.draft_q[holders, self.tokens.new_tensor(chain)] = 1e-6",
           "a copied child's q is not one-hot, so min(1, P/q) accepts it whatever P says"),
    Mutant("copy-accepted-outright-alone", "specviz.sequoia.decoder", "SequoiaDecoder._copy_alone",
           "self.draft_q[torch.arange(length, device=dev), self.tokens.new_tensor(chain)] = 1.0",
           "self.draft_q[torch.arange(length, device=dev), self.tokens.new_tensor(chain)] = 1e-6",
           "a copy verified alone has q far below 1, so min(1, P/q) accepts it whatever P says"),
    Mutant("lookahead-device-fallback-raw-p", "specviz.sequoia.verify", "sampled_walk",
           "                p = torch.where(miss, residual_one_hot(p, tok), p)\n", "",
           "a rejected Lookahead candidate's token keeps its mass in P: later tries and the fallback token are "
           "drawn from P with the rejected tokens included"),
    Mutant("lookahead-device-accept-raw-p", "specviz.sequoia.verify", "residual_one_hot",
           "r / mass.clamp_min(RESIDUAL_EPS)", "r",
           "Lookahead accepts a later try with its raw P(x), not renormalised over the tokens not yet rejected"),
    Mutant("sampler-ignores-temperature", "specviz.engine.sampling", "probs_from_logits",
           "    scores = logits.float() / cfg.temperature\n", "    scores = logits.float()\n",
           "probabilities are computed at temperature 1 whatever the setting"),
    Mutant("checkout-shares-a-session", "specviz.engine.static", "checkout",
           "        found = next((session for session in kept if not session.in_use), None)\n",
           "        found = next(iter(kept), None)\n",
           "a race takes a kept graph session while another race is using it: two races, one KV cache"),
]
BY_NAME = {m.name: m for m in MUTANTS}

# Imported before patching, so every module that binds a mutated function by name is rebound too.
DECODER_MODULES = ["specviz.engine.sampling", "specviz.autoregressive.decoder", "specviz.sequoia.decoder",
                   "specviz.lookahead.decoder", "specviz.sequoia.verify", "specviz.lookahead.verify",
                   "specviz.sequoia.tree"]


def _resolve(mutant: Mutant):
    """(owner, attribute name, function) for the mutant's target."""
    owner = importlib.import_module(mutant.module)
    *classes, name = mutant.function.split(".")
    for cls in classes:
        owner = getattr(owner, cls)
    return owner, name, inspect.getattr_static(owner, name)


def _mutated_function(mutant: Mutant, original):
    func = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    source = textwrap.dedent(inspect.getsource(func))
    found = source.count(mutant.old)
    if found != 1:
        raise AssertionError(f"mutant {mutant.name}: the text to replace occurs {found} times in "
                             f"{mutant.module}.{mutant.function} (re-point the mutant after a refactor)")
    namespace: dict = {}
    module = sys.modules[mutant.module]
    code = compile(source.replace(mutant.old, mutant.new), f"<mutant {mutant.name}>", "exec")
    exec(code, module.__dict__, namespace)   # the module's globals: the copy sees what the original saw
    return namespace[func.__name__]


def apply(name: str) -> list:
    """Plant mutant `name`; returns what `restore` needs to take it out again."""
    mutant = BY_NAME[name]
    for module_name in DECODER_MODULES:
        importlib.import_module(module_name)
    owner, attr, original = _resolve(mutant)
    replacement = _mutated_function(mutant, original)
    undo = [(owner, attr, original)]
    setattr(owner, attr, replacement)
    if inspect.ismodule(owner):   # rebind every `from ... import name` of it in the package
        for module in list(sys.modules.values()):
            if (module is not owner and getattr(module, "__name__", "").startswith("specviz")
                    and getattr(module, attr, None) is original):
                undo.append((module, attr, original))
                setattr(module, attr, replacement)
    return undo


def restore(undo: list) -> None:
    for owner, attr, original in reversed(undo):
        setattr(owner, attr, original)


@contextmanager
def mutated(name: str):
    undo = apply(name)
    try:
        yield BY_NAME[name]
    finally:
        restore(undo)
