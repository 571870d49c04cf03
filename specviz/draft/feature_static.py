"""The feature draft's forward at fixed shapes, for the static-buffer step (graph-captured on CUDA).

`FeatureDraftForward`'s arithmetic (fuse the pair (feature, token), the draft's layers, its norm)
over a cache of a fixed capacity, with `LeanLlama.forward_static`'s conventions: K/V written with
`index_copy_` at the slots the shape's buffers name, attention over the whole cache under an
additive mask built on the device (`engine.static.StaticShape.mask`), and the target's whole head
(fixed shape, no `widen`). It runs the draft's own (float) weights: the CPU's int8 kernels serve
the eager path only, and on a GPU a level is launch-bound, not weight-bound.

A `FeatureShape` is a `StaticShape` with one more buffer: the features each row reads (a true
feature, taps included, at the root's pairs; a parent's predicted feature at a tree level).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F

from ..engine.lean import attention_backends, attention_kernels
from ..engine.llama import decoder_layer, rms_norm
from ..engine.static import StaticShape, _kept_shape


class FeatureShape(StaticShape):
    """A fixed-shape feature-draft forward: `ids` (1, n) and `features` (n, width) in, (logits, features) out."""

    def __init__(self, forward: "FeatureStaticForward", key, width: int, **spec):
        super().__init__(forward, key, **spec)
        self.features = torch.zeros(self.n, width, dtype=forward.dtype, device=forward.device)

    def compute(self):
        slots = self.write_offsets + self.origin
        positions = (self.position_offsets + self.origin).clamp(max=self.max_position)
        return self.forward.forward_static(self.ids, self.features, slots, positions, self.mask(), self.rows)

    def eager(self):
        """Uncaptured, the same whole-capacity forward (the feature draft has no filled-slots form yet)."""
        return self.compute()

    def __call__(self, ids: torch.Tensor, features: torch.Tensor, origin: int):
        self.features.copy_(features)
        return super().__call__(ids, origin)


class FeatureStaticForward:
    """A feature draft's forward over a zeroed cache of `capacity` slots, its shapes, and the session's runner."""

    capturable = True   # as a `StaticForward` over the lean forward

    def __init__(self, draft, capacity: int, runner, role: str):
        self.draft, self.runner, self.role = draft, runner, role
        self.device, self.dtype = draft.fc.weight.device, draft.fc.weight.dtype
        self.max_len = capacity
        self.lean = self   # what `StaticShape` reads its device, dtype and capacity from
        self.columns = torch.arange(capacity, device=self.device)
        self.layers = draft.decoder_layers()
        self.backends = attention_backends(self.device)
        self.cos, self.sin = draft.rotary(torch.arange(capacity, device=self.device), self.dtype)
        shape = (1, draft.n_kv, capacity, draft.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        # The target's whole head: a fixed shape, whatever tokens a prompt adds.
        self.head = draft._target[0].lm_head.weight.detach().to(self.dtype)
        self.shapes: dict = {}
        self.transient: OrderedDict = OrderedDict()

    def shape(self, name, width: int, kept: int | None = None, **spec) -> FeatureShape:
        """The shape `name` (see `StaticForward.shape`, `kept` included)."""
        return _kept_shape(self, name, kept, lambda: FeatureShape(self, (self.role, name), width, **spec))

    def _layers(self, x: torch.Tensor, cos, sin, kv, mask, causal: bool) -> torch.Tensor:
        with attention_kernels(self.device, self.backends):
            for i, layer in enumerate(self.layers):
                x = decoder_layer(layer, x, cos, sin, kv, i, mask, causal)
        return rms_norm(x, self.draft.norm, self.draft.eps)[0]

    def forward_static(self, ids: torch.Tensor, features: torch.Tensor, slots: torch.Tensor,
                       positions: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor):
        """(logits of `rows` over the whole vocabulary, predicted features of every row)."""
        keys, values = self.keys, self.values

        def kv(i: int, k: torch.Tensor, v: torch.Tensor):
            keys[i].index_copy_(2, slots, k)
            values[i].index_copy_(2, slots, v)
            return keys[i], values[i]

        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        x = self.draft.fuse(ids, features.unsqueeze(0))
        out = self._layers(x, cos, sin, kv, mask, False)
        return F.linear(out.index_select(0, rows), self.head), out

    def prefill(self, ids: torch.Tensor, features: torch.Tensor) -> None:
        """The prompt's pairs into slots 0 .. n-1, causally (eager: its length follows the prompt)."""
        n = ids.shape[1]

        def kv(i: int, k: torch.Tensor, v: torch.Tensor):
            self.keys[i][:, :, :n] = k
            self.values[i][:, :, :n] = v
            return k, v

        x = self.draft.fuse(ids, features.unsqueeze(0).to(self.dtype))
        self._layers(x, self.cos[:n], self.sin[:n], kv, None, n > 1)
