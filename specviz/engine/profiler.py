"""Measured forward costs: t(n), the time of one forward over n new tokens after a context.

Both speculative decoders size themselves from this curve (Sequoia's tree budget,
Lookahead's W, N, G), so it is measured once per (model, device, dtype, context)
and cached as JSON under the SpecViz cache directory.

With `graphs=True` the curve is what a decoder running its static-buffer step pays
(`engine.static`): each size is a `StaticShape` (n causal rows after the context, every
row's logits) run through a `GraphRunner`, so on CUDA it times replays of captured
graphs, not eager launches (a 135M model's t(1) falls from ~14 ms to ~4 ms on an H200,
which moves `auto`'s trees and windows). On a CPU the same shapes run eagerly. The two
curves are cached under different keys.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from ..paths import cache_dir, read_json, write_json
from .kernels import packed_matmul_supported
from .lean import causal_mask, lean_llama_supported, make_forward
from . import measuring
from .machine import fingerprint, fingerprint_tag


def default_sizes(device: torch.device) -> list[int]:
    """1, 2, 4, ... up to 1024 rows on a GPU, 256 on a CPU: what a target's curve is measured at."""
    return [1 << i for i in range(11 if device.type == "cuda" else 9)]


# The sizes of a draft's curve, and what Lookahead's and prompt lookup's choices read of the target's (whose
# curve is measured at `default_sizes`, of which these are the first: one measurement serves every method).
SMALL_SIZES = [1, 2, 4, 8, 16, 32, 64]


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def target_key(pair) -> str:
    """The key of what is measured of a pair's target alone (Lookahead's `auto` sizes): its name, device,
    dtype and the forward that runs (`forward_kind`)."""
    return f"{pair.target_name}|{pair.device.type}|{dtype_name(pair.dtype)}|{forward_kind(pair.target)}"


def curve_key(pair, role: str = "target") -> str:
    """The key `forward_curve` caches the t(n) of a pair's `role` ('target' or 'draft') under, for every method
    that reads it: the model's name, device and dtype (`_curve_key` adds the forward timed and the context).
    Both roles' keys end ':target', as they always have: the key names the model, not the part it plays."""
    name = {"target": pair.target_name, "draft": pair.draft_name}[role]
    return f"{name}|{pair.device.type}|{dtype_name(pair.dtype)}:target"


def small_target_curve(pair, graphs: bool = False, refresh: bool = False) -> tuple[dict[int, float], bool]:
    """The target's t(n) at `SMALL_SIZES` (what Lookahead's and prompt lookup's choices read) and whether it was
    trusted (cached). Where it is not cached it is measured at every size Sequoia's sizing reads too
    (`default_sizes`, under `curve_key`): one measurement for every method, whichever asks first."""
    key = curve_key(pair, "target")
    full = forward_curve(pair.target, key, refresh=refresh, graphs=graphs)
    trusted = cached_forward_curve(pair.target, key, graphs=graphs) == full
    return {n: full[n] for n in SMALL_SIZES}, trusted


def target_curve_cached(pair, graphs: bool = False) -> bool:
    """Whether `small_target_curve` would read the curve from the cache (measures nothing)."""
    return cached_forward_curve(pair.target, curve_key(pair, "target"), graphs=graphs) is not None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# A curve measured while other programs held the cores is slower than this machine really is, and a
# cached one misleads `auto` for good (it once chose a 32-node tree from curves taken on a saturated
# machine: t(1) 66-77 ms against the real 25-39 ms). Linux counts each thread's time spent runnable but
# waiting for a core; above this share of the measuring threads' time, the curve is not cached.
CONTENDED_SHARE = 0.15


def runqueue_wait_seconds() -> float | None:
    """Seconds this process's threads have waited for a core so far (Linux /proc schedstat), else None."""
    total = 0
    try:
        for task in os.scandir("/proc/self/task"):
            with open(f"{task.path}/schedstat") as f:
                total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def graphs_timing(model, graphs: bool) -> bool:
    """Whether `graphs` changes what is timed for `model`: only where its decoding forward is the lean
    one a static shape runs (a draft with a forward of its own, or a model the lean forward does not
    cover, runs eagerly either way, and its curve keeps the eager key)."""
    from .static import static_supported

    return bool(graphs) and getattr(model, "timing_forward", None) is None and static_supported(model)


@torch.inference_mode()
def measure_forward_times(model, sizes: list[int], context_len: int = 200, repeats: int = 7,
                          warmup: int = 2, graphs: bool = False, label: str = "forward times") -> dict[int, float]:
    """Median milliseconds of one forward over n new tokens (tree-style 4-D mask) after `context_len`.

    `graphs`: time the static-buffer forwards the graphed decoders run (`static_forward_times`).

    It times the forward the decoders run (`timing_forward`: the lean Llama forward where
    it is exact, else transformers', or a draft's own level), over every row's logits. The sizes
    are timed in rounds, one forward of each per round, so a machine that slows down for a
    while slows every size alike instead of bending the curve. Each round runs from the largest
    size down: a small forward then follows one a little larger, as a decode's follows its
    last step's, not the 256-row one whose 50 MB of logits emptied the cache (that order put t(1)
    at 1.1-1.2x a decode's forward and t(2) below it, on a 2-core Zen 4 at q4).
    """
    if graphs_timing(model, graphs):
        return static_forward_times(model, sizes, context_len, repeats, warmup, label)
    measuring.phase(f"{label}, t(n) for n = {min(sizes)}..{max(sizes)}", (warmup + repeats) * len(sizes))
    calls = forward_calls(model, sorted(sizes, reverse=True), context_len)
    return timed_in_rounds(calls, next(model.parameters()).device, repeats, warmup)


def forward_calls(model, sizes: list[int], context_len: int = 200) -> dict:
    """n -> a call of `model`'s decoding forward over n new tokens after `context_len` (prefilled once)."""
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, context_len), generator=gen).to(device)
    forward = timing_forward(model, context_len + max(sizes))
    # The mask in what the forward computes in, as the decoders' shapes build it (the 4-bit forward's
    # activations are fp32 while its model's weights are bf16).
    dtype = getattr(forward, "dtype", None) or next(model.parameters()).dtype
    forward(context, 0)
    calls = {}
    for n in sizes:
        tokens = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        # The same kind of call the decoders make: explicit positions and an additive mask.
        mask = causal_mask(n, context_len, dtype, device)
        positions = torch.arange(context_len, context_len + n, device=device)
        calls[n] = functools.partial(forward, tokens, context_len, positions=positions, mask=mask, rows=n)
    return calls


def timed_in_rounds(calls: dict, device: torch.device, repeats: int, warmup: int) -> dict:
    """Median milliseconds of each call, timed in rounds (one of each per round)."""
    times: dict = {key: [] for key in calls}
    for i in range(warmup + repeats):
        for key, call in calls.items():
            _sync(device)
            start = time.perf_counter()
            call()
            _sync(device)
            if i >= warmup:
                times[key].append((time.perf_counter() - start) * 1000)
            measuring.tick()   # after the clock: a paused background measurement waits here, untimed
    return {key: statistics.median(times[key]) for key in calls}


def causal_shape_spec(n: int) -> dict:
    """A `StaticShape` spec of n new tokens after the context: row i writes slot origin + i at position
    origin + i, sees the context and rows 0..i (causal), and returns its logits (what t(n) times)."""
    rows = list(range(n))
    return {"write_offsets": rows, "position_offsets": rows,
            "block": torch.tril(torch.ones(n, n, dtype=torch.bool)), "rows": rows}


@torch.inference_mode()
def static_forward_times(model, sizes: list[int], context_len: int = 200, repeats: int = 7,
                         warmup: int = 2, label: str = "forward times") -> dict[int, float]:
    """`measure_forward_times` through `engine.static`: one `StaticShape` per size on a session of its
    own, captured on CUDA by the first warm-up call (so the capture is never timed) and replayed after;
    eager on a CPU. The same rounds as the eager timing, one forward of each size per round."""
    from .static import GraphSession, cache_capacity, full_vocabulary_head

    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    session = GraphSession(device, capture=device.type == "cuda", capacity=cache_capacity(context_len + max(sizes)))
    forward = session.forward("timing", model, full_vocabulary_head(model))
    forward.prefill(torch.randint(0, vocab, (1, context_len), generator=gen).to(device))
    calls = {}
    for n in sizes:
        shape = forward.shape(("causal", n), **causal_shape_spec(n))
        shape.ids.copy_(torch.randint(0, vocab, (1, n), generator=gen))
        calls[n] = functools.partial(shape, None, context_len)
    warmup = max(1, warmup)
    measuring.phase(f"{label} (static shapes), t(n) for n = {min(sizes)}..{max(sizes)}",
                    (warmup + repeats) * len(sizes))
    # Largest first, as `measure_forward_times` says why.
    times = timed_in_rounds(dict(sorted(calls.items(), reverse=True)), device, repeats, warmup)
    return {n: times[n] for n in sizes}


def timing_forward(model, max_len: int):
    """The forward whose cost is one decoding forward (a tree level, for a draft) of `model`, behind
    `make_forward`'s (ids, start, positions, mask, rows) interface. A draft whose levels run some other
    forward (a feature draft reads the target's features too) says so with `timing_forward` of its own."""
    own = getattr(model, "timing_forward", None)
    return own(max_len) if own is not None else make_forward(model, max_len)


def forward_kind(model) -> str:
    """Names what `measure_forward_times` times for this model, so a cached curve matches the code."""
    head = getattr(model, "lm_head", None)
    rows = getattr(head, "vocab_ids", None)
    # "lean-stacked": LeanLlama since q|k|v and gate|up became one matmul each (curves timed before are stale);
    # "lean-packed": and its matrices prepacked for oneDNN (a CPU in bf16), 1.2-1.5x faster again.
    kind = getattr(model, "decoding_kind", None)
    if kind is None and lean_llama_supported(model):
        weight = model.lm_head.weight
        kind = "lean-packed" if packed_matmul_supported(weight.device, weight.dtype) else "lean-stacked"
    kind = kind or "hf"
    return kind if rows is None else f"{kind}-head{int(rows.numel())}"


# What is measured on this machine and so belongs to the machine it was measured on (`engine.machine`):
# forward curves, Sequoia's step costs and plans, Lookahead's auto table, the hf peers' tuning, `auto`'s
# precision, the memory's and the int8 units' rates (`floors`). Acceptance rates are the models' business,
# not the machine's, and stay shared.
MACHINE_KINDS = frozenset({"forward", "sequoia-step-costs", "sequoia-plan", "lookahead-auto", "hf-tuning",
                           "precision", "floors"})


def _machine(kind: str, key: str) -> dict | None:
    if kind not in MACHINE_KINDS:
        return None
    # Every timing key names its device after the model ('name|cuda|bf16...'): a GPU's name then joins in.
    return fingerprint("cuda" if "|cuda" in key else "cpu")


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def _profile_path(kind: str, key: str, machine: dict | None = None) -> Path:
    safe = _safe(key)
    path = cache_dir() / "profiles"
    path.mkdir(parents=True, exist_ok=True)
    # The thread count readable in the name, so 1- and 2-thread curves lie side by side.
    tag = f"@{fingerprint_tag(machine)}" if machine else ""
    return path / f"{kind}-{safe}{tag}.json"


def cached_paths(kind: str, key_prefix: str) -> list[Path]:
    """The files of `kind` whose key may start with `key_prefix` (any machine, any thread count), newest
    first, found by name: a reader of one pair's entries opens those, not every file of the kind. A name
    says its key only up to the characters it replaces, so a reader still checks the key inside."""
    folder = cache_dir() / "profiles"
    found = folder.glob(f"{kind}-{_safe(key_prefix)}*.json") if folder.is_dir() else []
    stamped = []
    for path in found:
        try:
            stamped.append((path.stat().st_mtime, path))
        except OSError:
            continue   # removed since the listing
    return [path for _, path in sorted(stamped, reverse=True)]


def load_cached(kind: str, key: str) -> dict | None:
    """The cached entry, or None. A measured kind is read only under the fingerprint it was saved with:
    files from before fingerprints (no tag in the name) or from another machine are ignored, not misread."""
    machine = _machine(kind, key)
    data = read_json(_profile_path(kind, key, machine))
    if data is None:
        return None   # never measured here, or a damaged file: measured again
    if machine is not None and (not isinstance(data, dict) or data.get("machine") != machine):
        return None   # a hash collision or a hand-copied file: not this machine's measurement
    if machine is not None:
        data = {k: v for k, v in data.items() if k != "machine"}   # read back as it was saved
    return data


def save_cached(kind: str, key: str, data: dict) -> Path:
    machine = _machine(kind, key)
    if machine is not None:
        data = {**data, "machine": machine}
    path = _profile_path(kind, key, machine)
    write_json(path, data)
    if machine is not None:
        measuring.saved(path)   # the command line says where a measurement went
    return path


def _curve_key(model, key: str, context_len: int, graphs: bool = False) -> str:
    # A graphed curve where graphs change the timing: `-graphs` (CUDA replays) or `-static` (a CPU's eager
    # run of the same static shapes); an eager curve keeps the key it always had.
    mode = ""
    if graphs_timing(model, graphs):
        mode = "-graphs" if next(model.parameters()).device.type == "cuda" else "-static"
    # "-down": rounds from the largest size down (curves timed upwards put t(1) after 256 rows: stale).
    # The mode comes last so a graphed curve's key is always the eager one's plus its mode.
    return f"{key}-{forward_kind(model)}-ctx{context_len}-down{mode}"


def cached_forward_curve(model, key: str, sizes: list[int] | None = None,
                         context_len: int = 200, graphs: bool = False) -> dict[int, float] | None:
    """The cached t(n) for `model`, or None: also tells a caller whether a curve it got was trusted."""
    sizes = sizes or default_sizes(next(model.parameters()).device)
    cached = load_cached("forward", _curve_key(model, key, context_len, graphs))
    if cached and all(str(n) in cached.get("ms", {}) for n in sizes):
        return {n: float(cached["ms"][str(n)]) for n in sizes}
    return None


def forward_curve(model, key: str, sizes: list[int] | None = None, context_len: int = 200,
                  refresh: bool = False, graphs: bool = False) -> dict[int, float]:
    """t(n) in ms for `model`, cached under `key` (`curve_key`); `graphs`: of the static-
    buffer forwards (replays on CUDA), cached apart from the eager curve."""
    device = next(model.parameters()).device
    sizes = sizes or default_sizes(device)
    cache_key = _curve_key(model, key, context_len, graphs)
    cached = None if refresh else cached_forward_curve(model, key, sizes, context_len, graphs)
    if cached:
        return cached
    # What a progress bar calls the curve: key 'SmolLM2-135M-Instruct|cpu|bf16:target' is
    # "SmolLM2-135M-Instruct's forward times".
    label = f"{key.split('|')[0].split('/')[-1]}'s forward times"
    curve, contention = with_contention(
        lambda: measure_forward_times(model, sizes, context_len, graphs=graphs, label=label), device)
    if contention is None or contention <= CONTENDED_SHARE:
        save_cached("forward", cache_key, {"key": key, "context_len": context_len, "graphs": bool(graphs),
                                           "ms": {str(n): v for n, v in curve.items()}, "waiting_share": contention})
        return curve
    print(f"specviz: the forward-time curve of {key} was measured while other programs held the cores "
          f"({100 * contention:.0f}% of its time waiting for one): used for this run only, not cached",
          file=sys.stderr)
    return curve


def with_contention(measure, device: torch.device):
    """(measure(), the share of this process's threads' time spent waiting for a core, None off Linux).

    On a GPU the host thread mostly waits for the device, not for a core, so only CPU timings are judged.
    """
    wait0, t0 = runqueue_wait_seconds(), time.perf_counter()
    result = measure()
    wait1, wall = runqueue_wait_seconds(), time.perf_counter() - t0
    if device.type != "cpu" or wait0 is None or wait1 is None:
        return result, None
    return result, (wait1 - wait0) / (wall * max(1, torch.get_num_threads()))
