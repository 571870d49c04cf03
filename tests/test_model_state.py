"""What SpecViz keeps per model is one named object (`engine.model_state.ModelState`), not attributes of its own
on the torch module, and a shallow copy's caches stay the copy's."""

from __future__ import annotations

import copy

import torch
from helpers import tiny_pair

from specviz.engine.methods import make_decoder
from specviz.engine.model_state import NAME, found_state, fresh_state, state_of


def test_a_decode_leaves_one_named_state_on_the_model(one_thread):
    pair = tiny_pair(draft_seed=1)
    assert found_state(pair.target) is None
    make_decoder("sequoia", pair, "", prompt_ids=[1, 2, 3], max_new_tokens=6, tree_parents=[-1, 0, 0, 1]).run()
    state = found_state(pair.target)
    assert state is not None and state.graph_sessions   # the session the decoder checked out, kept for the next
    ours = [name for name in vars(pair.target) if "specviz" in name.lower()]
    assert ours == [NAME], ours


def test_a_shallow_copy_keeps_its_caches_to_itself():
    model = torch.nn.Linear(2, 2)
    state_of(model).packed = ("the original's",)
    # The hazard: `copy.copy` shares attribute values, so a copy would write into its original's state.
    assert state_of(copy.copy(model)) is state_of(model)
    clone = copy.copy(model)
    fresh_state(clone).draft_stack = "the copy's"
    assert state_of(model).draft_stack is None and state_of(model).packed == ("the original's",)
    assert state_of(clone).packed is None and state_of(clone).draft_stack == "the copy's"
