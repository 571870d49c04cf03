"""What SpecViz derives from a model and keeps while the model lives: one named object per model, `ModelState`.

A decoder is made per prompt, and each would otherwise pay again what only the weights decide: the quantised
layers a q4 or int8 target runs (`quant.attach_*`) and their compiled stack (`lean`), the oneDNN-packed
weights (`kernels.packed_weights`), an int8 draft's levels and head (`draft.feature`), and the graph
sessions whose captured shapes a later race replays (`static.checkout`). They are the fields below, each with
what reads it, reached through `state_of(model)`.

The state stays with the model, under the one attribute `specviz_state`, because it must live exactly as long
as the weights it was derived from: a table of models kept anywhere else would either hold the weights alive
or need every reader to handle a model it has never seen. A shallow copy of a module (`copy.copy`, which shares
its attribute values) gets a state of its own with `fresh_state`, so a copy's caches never land on its original.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAME = "specviz_state"


@dataclass
class ModelState:
    # The quantised layers the lean forward runs in place of the dense ones (`quant.WeightOnlyLayers`).
    weight_only: Any = None
    # (those layers, their `llama.LayerStack`): compiled once per model, about a second (`lean`).
    weight_only_stack: tuple | None = None
    # (the dense matrices' identity, their `llama.LayerStack` compiled and as it is, their packed copies) (`lean`).
    dense_stack: tuple | None = None
    # (the weights' identity and versions, their oneDNN-packed copies, the weights): `kernels.packed_weights`.
    packed: tuple | None = None
    # An int8 or kernel copy of a draft: its layers as one `llama.LayerStack` (`quant.fbgemm_layers`, `quant.kernel_copy`).
    draft_stack: Any = None
    # A feature draft's (versions, int8 parts, head, cut head): `draft.feature.FeatureDraft.int8_parts`.
    int8_parts: tuple | None = None
    # (method, capacity, capture) -> the `static.GraphSession`s kept for later races of that kind.
    graph_sessions: dict = field(default_factory=dict)


def state_of(model) -> ModelState:
    """The model's state, made empty on first use."""
    state = model.__dict__.get(NAME)
    if state is None:
        state = model.__dict__[NAME] = ModelState()
    return state


def weights_version(module) -> tuple:
    """Which tensors `module`'s parameters are and how often each was changed in place, for a field above that is
    kept while the weights stay the same: an optimiser step bumps a parameter's version counter. A tensor made
    under inference_mode keeps no counter (and cannot be changed outside inference_mode): its storage is its
    identity."""
    return tuple((p.data_ptr(), -1 if p.is_inference() else p._version) for p in module.parameters())


def found_state(model) -> ModelState | None:
    """The model's state where it has one, else None (a reader that must not make one)."""
    return getattr(model, "__dict__", {}).get(NAME)


def fresh_state(clone) -> ModelState:
    """A shallow copy's own empty state, in place of the one `copy.copy` shared with its original."""
    state = clone.__dict__[NAME] = ModelState()
    return state
