"""Fixed-shape forwards over static buffers: what a decoder's step hands to the graph runner.

A `StaticShape` is one forward a decoder runs every step at the same row count: a tree's
target verification, one draft level, a Lookahead window, AR's single token. Everything
that changes between steps is data in its buffers:
- `ids` (1, n): the tokens (filled with `copy_` from device tensors: no host round trip);
- `origin` (0-d): the slot of the shape's first block column; the only per-step number,
  which the host knows anyway (the committed length) and writes with `fill_`.
What is fixed per shape is built once: each row's write slot and position relative to
`origin`, the block of slots origin .. origin + B each row may see (a tree's ancestors,
a window's layout), and which rows' logits come back. The mask over the whole cache
(every slot before `origin`, then the block, nothing after) is built on the device
inside the graphed function, so no step rebuilds one on the host.

`GraphSession` holds one decoder's static forwards and their graphs. It is kept on the
target model when the decoder closes (as `kernels.packed_weights` keeps prepacked
weights), so the next race of the same method and capacity replays graphs already
captured: a reused ZeroGPU worker, or a second race on a dedicated GPU, pays no capture.
A session holds a KV cache and buffers that its decoder writes every step, so it is one
race's alone while checked out: races at once (ZeroGPU's parallel calls) each take a free
one or a new one, and `checkout`'s test-and-take is one step under a lock.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import torch

from .graphs import GraphRunner
from .lean import LeanLlama, ModelForward, VocabSubsetHead, lean_llama_supported
from .model_state import state_of

MIN_CAPACITY = 256
SESSIONS_KEPT = 2   # per (method, capacity): two races at once each get their own buffers
# Makes `checkout`'s "find a session not in use, mark it in use" atomic across the server's threads
# (without it two races starting together could both take one session and write one KV cache).
_CHECKOUT = threading.Lock()


def cache_capacity(max_len: int) -> int:
    """Slots a static cache allocates for a run needing `max_len`: the next power of two (at least 256),
    so a handful of capacities (and their graphs) serve every race length."""
    return max(MIN_CAPACITY, 1 << (max_len - 1).bit_length())


class StaticShape:
    """One fixed-shape forward of a `StaticForward`: buffers in, logits (and features) out.

    Two forms of the same computation, chosen by the runner (`GraphRunner.run`):
    - `compute`, captured (CUDA, graphs on): attention over the whole preallocated capacity under a
      mask built on the device from `origin`, so one width serves every step;
    - `eager`, everything else (every CPU run): attention over the filled slots only, [0, origin + B),
      as a plain forward does, under a view of a mask made once per shape (no mask at all where every
      row sees every slot, as AR's one token does). On a CPU the empty tail would cost attention over
      up to capacity slots per step for nothing.
    """

    def __init__(self, forward: "StaticForward", key, write_offsets: list[int], position_offsets: list[int],
                 block: torch.Tensor, rows: list[int], hidden: bool = False, taps: tuple[int, ...] = (),
                 max_position: int | None = None):
        lean, device = forward.lean, forward.lean.device
        self.forward, self.key = forward, key
        self.capturable = forward.capturable   # a shape among many that follow the data never is (`kept`)
        n = len(write_offsets)
        self.n = n
        self.ids = torch.zeros(1, n, dtype=torch.long, device=device)
        self.origin = torch.zeros((), dtype=torch.long, device=device)
        self.write_offsets = torch.tensor(write_offsets, dtype=torch.long, device=device)
        self.position_offsets = torch.tensor(position_offsets, dtype=torch.long, device=device)
        self.block = block.to(device=device, dtype=torch.bool)          # (n, B)
        self.block_width = self.block.shape[1]
        self.rows = torch.tensor(rows, dtype=torch.long, device=device)
        self.hidden, self.taps = hidden, tuple(taps)
        self.max_position = lean.max_len - 1 if max_position is None else min(max_position, lean.max_len - 1)
        self.neg = torch.tensor(torch.finfo(lean.dtype).min, dtype=lean.dtype, device=device)
        self.zero = torch.zeros((), dtype=lean.dtype, device=device)
        self.capacity = lean.max_len
        # The eager form's masks, all at once: columns [0, capacity) are the prefix (seen), then the block.
        # Origin o's mask is the view of columns [capacity - o, capacity + B): width o + B, no copy.
        self.sees_all = bool(self.block.all())
        self.prefix_and_block = None
        self._mask_stale = not self.sees_all   # the eager masks are made when first needed
        self._origin = 0   # origin as a host number, for the eager form's slicing

    def refill(self, block: torch.Tensor | None = None, position_offsets: torch.Tensor | None = None) -> None:
        """New contents for a shape whose block (and positions) follow the data at a fixed row count (a
        padded adaptive tree's): the same buffers, so a captured graph reads them at its next replay."""
        if block is not None:
            self.block.copy_(block)
            self.sees_all, self._mask_stale = False, True
        if position_offsets is not None:
            self.position_offsets.copy_(position_offsets)

    def block_mask(self, end: int) -> torch.Tensor:
        """The eager form's (1, 1, n, end) additive mask at the current origin: a view, no copy."""
        if self._mask_stale:   # once per shape, or once per refill
            if self.prefix_and_block is None:
                self.prefix_and_block = torch.zeros(self.n, self.capacity + self.block_width, dtype=self.zero.dtype,
                                                    device=self.block.device)
            self.prefix_and_block[:, self.capacity:] = torch.where(self.block, self.zero, self.neg)
            self._mask_stale = False
        return self.prefix_and_block[:, self.capacity - self._origin:].view(1, 1, self.n, end)

    def mask(self) -> torch.Tensor:
        """(1, 1, n, max_len) additive: every slot before origin, then the block, nothing after."""
        cols = self.forward.columns
        rel = cols - self.origin
        inside = (rel >= 0) & (rel < self.block_width)
        in_block = self.block.index_select(1, rel.clamp(0, self.block_width - 1)) & inside
        allowed = (cols < self.origin) | in_block
        return torch.where(allowed, self.zero, self.neg).view(1, 1, self.n, -1)

    def _inputs(self):
        slots = self.write_offsets + self.origin
        positions = (self.position_offsets + self.origin).clamp(max=self.max_position)
        return slots, positions

    def compute(self):
        """The forward over the buffers as they stand, over the whole capacity (what a graph records)."""
        slots, positions = self._inputs()
        return self.forward.lean.forward_static(self.ids, slots, positions, self.mask(), self.rows,
                                                hidden=self.hidden, taps=self.taps)

    def _filled_end(self) -> int:
        """Where the eager form's attention ends: the filled slots are [0, origin + B)."""
        end = self._origin + self.block_width
        if end > self.capacity:
            raise ValueError(f"static shape {self.key}: {end} slots needed, {self.capacity} allocated")
        return end

    def eager(self):
        """The same forward over the filled slots [0, origin + B) only (nothing captured)."""
        end = self._filled_end()
        slots, positions = self._inputs()
        mask = None if self.sees_all else self.block_mask(end)
        return self.forward.filled(self.ids, slots, positions, mask, self.rows, self.hidden, self.taps, end)

    def __call__(self, ids: torch.Tensor | None, origin: int):
        """Fill the buffers (`ids` None: already filled) and run: replayed, captured now, or eager."""
        if ids is not None:
            self.ids.copy_(ids.view(1, self.n))
        self.origin.fill_(origin)
        self._origin = origin
        return self.forward.runner.run(self.key, self.compute, self.eager, self.capturable)


class StaticForward:
    """A forward whose cache, rotary tables and shapes are fixed for graph capture.

    Over a `LeanLlama` its shapes can be captured; over a `ModelForward` (transformers' own forward: an
    architecture the lean forward does not cover) they always run eagerly, the
    same calls, so a decoder has one step for both.
    """

    def __init__(self, lean: LeanLlama | ModelForward, runner: GraphRunner, role: str):
        self.lean, self.runner, self.role = lean, runner, role
        self.capturable = isinstance(lean, LeanLlama)
        if self.capturable:
            lean.zero_cache()
        self.columns = torch.arange(lean.max_len, device=lean.device)
        self.shapes: dict = {}
        self.transient: OrderedDict = OrderedDict()

    def shape(self, name, kept: int | None = None, **spec) -> StaticShape:
        """The shape `name` (made from `spec` the first time: see `StaticShape`).

        `kept`: the shape is one of many that follow the data (an adaptive tree's), of which only the
        `kept` most recently used are held; the rest are made again when they recur."""
        return _kept_shape(self, name, kept, lambda: StaticShape(self, (self.role, name), **spec))

    def prefill(self, ids: torch.Tensor, hidden: bool = False, taps: tuple[int, ...] = ()):
        """The prompt, eagerly (its length is the one shape that follows the data), into slots 0..P-1."""
        return self.lean.forward(ids, 0, hidden=hidden, taps=taps)

    def filled(self, ids, slots, positions, mask, rows, hidden, taps, end: int):
        """A shape's eager form: attention over slots [0, end) only."""
        if self.capturable:
            return self.lean.forward_static(ids, slots, positions, mask, rows, hidden=hidden, taps=taps, end=end)
        # transformers' forward writes the n new tokens right after its cache: slots end - n .. end - 1,
        # where every shape a decoder runs over it writes (the last n slots of its block).
        start = end - ids.shape[1]
        return self.lean.forward(ids, start, positions=positions, mask=mask, rows=rows, hidden=hidden, taps=taps)

    def keep(self, prefix_len: int, slots: torch.Tensor) -> None:
        """Move the K/V of `slots` (a fixed-length index; entries past the kept ones may repeat) to
        prefix_len, prefix_len + 1, ...: slots past the kept ones get whatever, masked until rewritten."""
        self.lean.keep(prefix_len, slots)


def _kept_shape(forward, name, kept: int | None, make):
    """`forward.shapes[name]`, or made by `make`; with `kept`, from the bounded `forward.transient`."""
    if kept is None:
        found = forward.shapes.get(name)
        if found is None:
            found = forward.shapes[name] = make()
        return found
    def make_uncaptured():
        shape = make()
        shape.capturable = False   # capturing each would cost far more than its few replays save
        return shape

    return recently_used(forward.transient, name, kept, make_uncaptured)


def recently_used(store: OrderedDict, key, bound: int, make):
    """`store[key]`, or made by `make`, keeping at most `bound` entries: the least recently used go first."""
    found = store.get(key)
    if found is None:
        if len(store) >= bound:
            store.popitem(last=False)
        found = store[key] = make()
    else:
        store.move_to_end(key)
    return found


def static_supported(model) -> bool:
    """Whether a model can run the static-buffer step (the lean forward is exact for it)."""
    return lean_llama_supported(model)


def full_vocabulary_head(model) -> torch.Tensor | None:
    """The ids of every row of a draft's full head when it is cut to a subset (else None): on a GPU the
    whole head costs microseconds, and a fixed head keeps the draft's shapes fixed (no `widen`)."""
    head = getattr(model, "lm_head", None)
    if isinstance(head, VocabSubsetHead):
        return torch.arange(head.full_weight.shape[0], device=head.full_weight.device)
    return None


class GraphSession:
    """One decoder's static forwards (by role: target, draft) and the runner that replays them."""

    def __init__(self, device: torch.device, capture: bool, capacity: int):
        self.runner = GraphRunner(device, capture)
        self.capacity = capacity
        # key -> (a weak reference to the model the forward was made over, the forward): see `kept`.
        self.forwards: dict = {}
        # A method's prepared state over these forwards, by its own keys (Sequoia's trees: index tensors, walk
        # tables, the shapes they run), reused by the session's next races.
        self.prepared: OrderedDict = OrderedDict()
        self.in_use = False

    def forward(self, role: str, model, vocab_ids: torch.Tensor | None = None) -> StaticForward:
        """The static forward of `role`: over `LeanLlama` where it is exact for `model`, else over transformers'
        own forward (never captured)."""
        use_lean = lean_llama_supported(model)

        def make():
            inner = LeanLlama(model, self.capacity, vocab_ids) if use_lean else ModelForward(model, self.capacity)
            return StaticForward(inner, self.runner, role)

        return self.kept((role, use_lean), model, make)

    def kept(self, key, model, make):
        """The forward kept under `key` if it was made over this very `model`, else `make()`'s, kept instead
        (and the graphs of the one it replaces dropped). A role names a draft by its id, which a later draft
        may be given once the first is gone: it must not draft through the other's forward or graphs."""
        made_over, found = self.forwards.get(key, (None, None))
        if found is None or made_over() is not model:
            if found is not None:
                self.runner.forget(found.role)
            found = make()
            self.forwards[key] = (weakref.ref(model), found)
        return found


def checkout(model, method: str, capacity: int, capture: bool) -> GraphSession:
    """A session for one decoder of `method` (its graphs from an earlier run when one is free)."""
    device = next(model.parameters()).device
    with _CHECKOUT:
        sessions = state_of(model).graph_sessions
        kept = sessions.setdefault((method, capacity, capture), [])
        found = next((session for session in kept if not session.in_use), None)
        if found is None:   # every kept one is in a race: a session of this race's own (kept if room)
            found = GraphSession(device, capture, capacity)
            if len(kept) < SESSIONS_KEPT:
                kept.append(found)
        else:
            found.runner.begin_run()
        found.in_use = True
        return found


def release(session: GraphSession | None) -> None:
    if session is not None:
        with _CHECKOUT:
            session.in_use = False
