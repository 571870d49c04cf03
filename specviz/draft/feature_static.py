"""The feature draft's forward at fixed shapes, for Sequoia's one step (graph-captured on CUDA).

`FeatureDraftForward`'s arithmetic (fuse the pair (feature, token), the draft's layers, its norm)
at the slots and positions a `FeatureShape`'s buffers name, in two forms (as `StaticShape`'s):
- `compute`, what a graph captures: `LeanLlama.forward_static`'s conventions (K/V written with
  `index_copy_`, attention over the whole cache under an additive mask built on the device), the
  draft's own float weights and the target's whole head (a fixed shape: no `widen`); on a GPU a
  level is launch-bound, not weight-bound;
- `eager`, on a CPU (where nothing is captured): `FeatureDraftForward` itself (weight-only int8 where
  `int8_decoding_supported`, the head over a vocabulary subset that widens as the target writes),
  attending over the filled slots only. On a CPU a level is weight-bound and the 49k-row head is most
  of it, so this is what makes it fast.

A `FeatureShape` is a `StaticShape` with one more buffer: the features each row reads (a true
feature, taps included, at the root's pairs; a parent's predicted feature at a tree level).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F

from ..engine.lean import attention_backends, attention_kernels
from ..engine.llama import rms_norm
from ..engine.static import StaticShape, _kept_shape
from .drafter import whole_head_wanted
from .feature import FeatureDraftForward


class FeatureShape(StaticShape):
    """A fixed-shape feature-draft forward: `ids` (1, n) and `features` (n, width) in, (logits, features) out."""

    def __init__(self, forward: "FeatureStaticForward", key, width: int, **spec):
        super().__init__(forward, key, **spec)
        self.features = torch.zeros(self.n, width, dtype=forward.dtype, device=forward.device)
        # The eager form writes its rows' K/V as one run of slots ending at the block's end.
        if spec["write_offsets"] != list(range(self.block_width - self.n, self.block_width)):
            raise ValueError(f"feature shape {key}: rows must write the last {self.n} slots of the block")

    def compute(self):
        slots, positions = self._inputs()
        return self.forward.forward_static(self.ids, self.features, slots, positions, self.mask(), self.rows)

    def eager(self):
        """Uncaptured: `FeatureDraftForward` over the filled slots [0, origin + B) only."""
        end = self._filled_end()
        if self.forward.eager_forward is None:   # a capturing session whose shape failed to capture
            return self.compute()
        positions = (self.position_offsets + self._origin).clamp(max=self.max_position)
        if self.sees_all:   # every row sees every slot: no mask for one row (a plain read), zeros for more
            mask = None if self.n == 1 else self.zero.expand(1, 1, self.n, end)
        else:
            mask = self.block_mask(end)
        return self.forward.filled(self.ids, self.features, end - self.n, positions, mask, self.rows)

    def __call__(self, ids: torch.Tensor, features: torch.Tensor, origin: int):
        self.features.copy_(features)
        return super().__call__(ids, origin)


class FeatureStaticForward:
    """A feature draft's forward over a cache of `capacity` slots, its shapes, and the session's runner.

    `eager_forward`, on a CPU: the `FeatureDraftForward` every shape runs (its cache, int8 weights and head
    over `vocab_ids`); None elsewhere, where the whole head is read captured or not, so a seed gives the
    same tokens either way (`drafter.whole_head_wanted`). `dtype` is the shapes' buffers'
    and masks' (fp32 where that forward runs fbgemm's int8 layers on fp32 activations).
    """

    capturable = True   # as a `StaticForward` over the lean forward

    def __init__(self, draft, capacity: int, runner, role: str):
        self.draft, self.runner, self.role = draft, runner, role
        self.device, self.dtype = draft.fc.weight.device, draft.fc.weight.dtype
        self.max_len = capacity
        self.lean = self   # what `StaticShape` reads its device, dtype and capacity from
        self.columns = torch.arange(capacity, device=self.device)
        self.eager_forward = None if whole_head_wanted(self.device) else FeatureDraftForward(draft, capacity)
        if self.eager_forward is not None:
            self.dtype = self.eager_forward.dtype
        # The capture form, in the draft's own dtype (kept uncaptured too: tests trace it on a CPU).
        self.weights_dtype = dtype = draft.fc.weight.dtype
        self.layers = draft.layers(dtype)
        self.backends = attention_backends(self.device)
        cos, sin = draft.rotary(torch.arange(capacity, device=self.device), dtype)
        self.cos, self.sin = cos.unsqueeze(1), sin.unsqueeze(1)   # (slots, 1, head_dim), as the layers read them
        # The capture form's K/V, made where it first runs: on a CPU every shape runs `eager_forward`, whose
        # cache is the one the draft reads, and a second one would only take memory.
        self.cache: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        # The target's whole head: a fixed shape, whatever tokens a prompt adds.
        self.head = draft._target[0].lm_head.weight.detach().to(dtype)
        self.shapes: dict = {}
        self.transient: OrderedDict = OrderedDict()

    def shape(self, name, width: int, kept: int | None = None, **spec) -> FeatureShape:
        """The shape `name` (see `StaticForward.shape`, `kept` included)."""
        return _kept_shape(self, name, kept, lambda: FeatureShape(self, (self.role, name), width, **spec))

    def reset_head(self, vocab_ids: torch.Tensor) -> None:
        """A new race's head rows (uncaptured): the draft's own and `vocab_ids`', none of the last race's."""
        if self.eager_forward is not None:
            self.eager_forward.reset_head(vocab_ids)

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        """The token of each logits column (None: the whole head, column = token)."""
        return None if self.eager_forward is None else self.eager_forward.vocab_ids

    def _layers(self, x: torch.Tensor, cos, sin, start: int, slots: torch.Tensor | None, end: int, mask,
                causal: bool) -> torch.Tensor:
        """The draft's layers over fused rows x (n, hidden), K/V written and read as `DecoderLayer.forward` says,
        then its norm: the predicted features."""
        if self.cache is None:
            shape = (1, self.draft.n_kv, self.max_len, self.draft.head_dim)
            self.cache = tuple([torch.zeros(shape, dtype=self.weights_dtype, device=self.device) for _ in self.layers]
                               for _ in range(2))
        keys, values = self.cache
        with attention_kernels(self.device, self.backends):
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, keys[i], values[i], start, slots, end, mask, causal)
        return rms_norm(x, self.draft.norm, self.draft.eps)

    def forward_static(self, ids: torch.Tensor, features: torch.Tensor, slots: torch.Tensor,
                       positions: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor):
        """(logits of `rows` over the whole vocabulary, predicted features of every row)."""
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        x = self.draft.fuse(ids.view(-1), features.to(self.weights_dtype))
        out = self._layers(x, cos, sin, 0, slots, -1, mask.to(self.weights_dtype), False)
        return F.linear(out.index_select(0, rows), self.head), out.to(self.dtype)

    def filled(self, ids: torch.Tensor, features: torch.Tensor, start: int, positions: torch.Tensor,
               mask: torch.Tensor | None, rows: torch.Tensor):
        """A shape's eager form: rows written at slots start.., attention over [0, start + n) only;
        (logits of `rows` over `vocab_ids`, predicted features of every row)."""
        forward = self.eager_forward
        out = forward(ids.view(-1), features, start, positions=positions, mask=mask)
        return forward.logits(out.index_select(0, rows)), out

    def prefill(self, ids: torch.Tensor, features: torch.Tensor) -> None:
        """The prompt's pairs into slots 0 .. n-1, causally (eager: its length follows the prompt)."""
        if self.eager_forward is not None:
            self.eager_forward(ids.view(-1), features, 0)
            return
        n = ids.shape[1]
        x = self.draft.fuse(ids.view(-1), features.to(self.weights_dtype))
        self._layers(x, self.cos[:n], self.sin[:n], 0, None, n, None, n > 1)
