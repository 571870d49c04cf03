"""What a target forward cannot beat on this machine: its two floors.

A forward over n new tokens reads every weight once, whatever n (plus the K/V cache it attends to), and does
n tokens' worth of multiply-accumulates. So its time is at least the larger of

- the **bandwidth floor**: bytes read ÷ the memory's measured read rate (flat in n), and
- the **arithmetic floor**: n × MACs per token ÷ the processor's measured int8 peak (growing with n).

Where the first is the larger, the forward is memory-bound and more rows are nearly free (a GPU, to dozens of
rows); where the second is, it is compute-bound and each row costs its share (a CPU after a few rows). The
measured t(n) against the two says how much of a forward is the hardware and how much the code: what
speculation can hope for here (`docs/benchmarks.md`, the hardware panel).

The rates are measured once per CPU, thread count and working set (cached as the `floors` profile: repeated
reads of a buffer as large as the forward's weights, and chains of `vpdpbusd` in registers on SpecViz's kernel,
`int8_peak`); the work comes from the model. The read is the forward's own size, not a fixed one past the cache:
where a CPU's last-level cache holds most of the weights (an Intel part with a 105 MB L3 holds a 100 MB q4
model), a forward re-reads them at the cache's rate, and a floor at the DRAM's rate would sit above t(n).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from .native import q4_rows_available

MIN_READ_BYTES = 64 << 20   # below this a read times the L2 and the loop, not what a forward streams from
FLOOR_SIZES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Rates:
    """This machine's measured rates at this process's thread count."""
    bandwidth_gbs: float          # read bandwidth, GB/s (1e9 bytes)
    int8_gmacs: float | None      # int8 multiply-accumulates, 1e9 per second (None: no VNNI kernel here)
    threads: int
    read_mib: int = 256           # the buffer the bandwidth was read over (older records: 256 MiB)


@dataclass(frozen=True)
class ForwardWork:
    """What one target forward reads and computes, from the model as it runs."""
    weight_bytes: int             # every product's weights (codes and scales) and the head, read once per forward
    kv_bytes_per_slot: int        # the K/V cache's bytes per context position, over all layers
    macs_per_token: int           # one new token's multiply-accumulates in the products and the head
    attention_macs_per_slot: int  # one new token's attention MACs per context position, over all layers
    weights: str                  # what the weights are ("q4: Q4_1 layers, Q8_0 head"), for the table's title


def read_mib(work: ForwardWork) -> int:
    """The buffer, in MiB, whose re-read rate bounds `work`'s forward: its weights, rounded up to 16 MiB so
    that models of about one size share a measurement."""
    return max(MIN_READ_BYTES, work.weight_bytes + (16 << 20) - 1) >> 24 << 4


def read_bandwidth_gbs(mib: int = 256, repeats: int = 20) -> float:
    """The best of `repeats` reductions over a buffer of `mib` MiB: the rate a forward's weights can stream at
    (a max: nothing but a load and a compare per float; the best run, since a shared machine only slows one;
    the runs spread over about a second, so that one busy moment of a neighbour's does not set them all)."""
    nbytes = mib << 20
    buffer = torch.ones(nbytes // 4, dtype=torch.float32)
    buffer.amax()   # faulted in, clocks up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.amax()
        best = min(best, time.perf_counter() - start)
        time.sleep(0.04)
    return nbytes / best / 1e9


def int8_peak_gmacs(repeats: int = 3, iters: int = 200_000) -> float | None:
    """The best of `repeats` runs of SpecViz's `int8_peak` (all of torch's threads); None where the kernel is
    not built here."""
    if q4_rows_available() is not None:
        return None
    torch.ops.specviz.int8_peak(iters // 10)   # clocks up
    return max(float(torch.ops.specviz.int8_peak(iters)) for _ in range(repeats)) / 1e9


def cached_rates(mib: int) -> Rates | None:
    """The rates measured on this machine at this thread count over `mib` MiB, or None (not measured here)."""
    from .profiler import load_cached

    cached = load_cached("floors", f"cpu-rates-{mib}MiB")
    if not cached or cached.get("threads") != torch.get_num_threads():
        return None
    return Rates(float(cached["bandwidth_gbs"]), cached.get("int8_gmacs"), int(cached["threads"]), mib)


def measured_rates(mib: int, refresh: bool = False) -> Rates:
    """This machine's rates over `mib` MiB (`read_mib`), measured once per CPU, thread count and size (about a
    second) and cached."""
    from .profiler import save_cached

    threads = torch.get_num_threads()
    cached = None if refresh else cached_rates(mib)
    if cached is not None:
        return cached
    peak = int8_peak_gmacs()
    rates = Rates(round(read_bandwidth_gbs(mib), 2), None if peak is None else round(peak, 1), threads, mib)
    save_cached("floors", f"cpu-rates-{mib}MiB", asdict(rates))
    return rates


def forward_work(model) -> ForwardWork:
    """What `model`'s decoding forward reads and computes per call: the weight-only layers it runs where it has
    them (`quant.WeightOnlyLayers`: q4, int8), else its dense parameters; the K/V cache in the forward's
    activation dtype (fp32 on the weight-only paths)."""
    from .quant import WeightOnlyLayers, layer_shapes

    cfg = model.config
    layers = cfg.num_hidden_layers
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    macs = layers * sum(out * inp for out, inp in layer_shapes(cfg)) + cfg.vocab_size * cfg.hidden_size
    quantized = WeightOnlyLayers.of(model)
    if quantized is not None:
        stored = sum(t.numel() * t.element_size() for t in quantized.tensors().values())
        if quantized.head is None:
            stored += model.lm_head.weight.numel() * model.lm_head.weight.element_size()
        kv_item, weights = WeightOnlyLayers.ACTIVATIONS.itemsize, (
            f"{quantized.precision}: {'Q4_1' if quantized.precision == 'q4' else quantized.precision} layers, "
            f"{'Q8_0' if quantized.head is not None else 'dense'} head")
    else:
        embed = model.get_input_embeddings().weight
        stored = sum(p.numel() * p.element_size() for p in model.parameters() if p is not embed)
        if getattr(cfg, "tie_word_embeddings", False):
            stored += embed.numel() * embed.element_size()   # the tied head reads it all; the lookup one row
        kv_item, weights = embed.element_size(), f"{str(embed.dtype).replace('torch.', '')} weights"
    kv_per_slot = layers * 2 * cfg.num_key_value_heads * head_dim * kv_item
    attention = layers * 2 * cfg.num_attention_heads * head_dim   # q.k and p.v, each head over each slot
    return ForwardWork(int(stored), kv_per_slot, int(macs), attention, weights)


def floors_ms(work: ForwardWork, rates: Rates, n: int, context: int) -> tuple[float, float | None]:
    """(bandwidth floor, arithmetic floor) in ms for a forward over n new tokens after `context` (None: no
    measured int8 peak)."""
    read = work.weight_bytes + work.kv_bytes_per_slot * (context + n)
    bandwidth = read / (rates.bandwidth_gbs * 1e9) * 1e3
    if rates.int8_gmacs is None:
        return bandwidth, None
    macs = n * (work.macs_per_token + work.attention_macs_per_slot * (context + n))
    return bandwidth, macs / (rates.int8_gmacs * 1e9) * 1e3


def floor_rows(curve: dict, work: ForwardWork, rates: Rates, context: int, sizes=FLOOR_SIZES) -> list[dict]:
    """Per size in both `sizes` and the measured `curve` (n -> ms): t(n), both floors, the higher one, and how
    far t(n) is above it; t(n) / t(1) beside them."""
    rows, one = [], curve.get(1) or curve.get("1")
    for n in sizes:
        ms = curve.get(n, curve.get(str(n)))
        if ms is None:
            continue
        bandwidth, arithmetic = floors_ms(work, rates, n, context)
        higher = max(bandwidth, arithmetic or 0.0)
        rows.append({"n": n, "t_ms": round(float(ms), 3), "t_over_t1": round(float(ms) / float(one), 3) if one else None,
                     "bandwidth_floor_ms": round(bandwidth, 3),
                     "arithmetic_floor_ms": None if arithmetic is None else round(arithmetic, 3),
                     "bound": "memory" if bandwidth >= (arithmetic or 0.0) else "compute",
                     "over_floor": round(float(ms) / higher, 2)})
    return rows


def as_record(rates: Rates, work: ForwardWork) -> dict:
    """The rates and the work as plain data (`RaceTrace.floors`)."""
    return {"rates": asdict(rates), "work": asdict(work)}


def from_record(record: dict) -> tuple[Rates, ForwardWork] | None:
    """`as_record`'s data back, or None where it is missing or malformed (an uploaded trace's is anything)."""
    try:
        rates = Rates(**record["rates"])
        work = ForwardWork(**record["work"])
        numbers = [rates.bandwidth_gbs, work.weight_bytes, work.kv_bytes_per_slot, work.macs_per_token,
                   work.attention_macs_per_slot] + ([] if rates.int8_gmacs is None else [rates.int8_gmacs])
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e15 for v in numbers) \
                or rates.bandwidth_gbs <= 0 or (rates.int8_gmacs is not None and rates.int8_gmacs <= 0) \
                or not isinstance(work.weights, str):
            return None
        return rates, work
    except (KeyError, TypeError):
        return None


def floors_record(curve: dict, work: ForwardWork, rates: Rates, context: int) -> dict:
    """The rates, the work and the rows (plain data): what the CLI prints."""
    return {**as_record(rates, work), "context": context, "rows": floor_rows(curve, work, rates, context)}


def table_markdown(record: dict) -> str:
    """The rows as the docs and the CLI print them."""
    rates, work = record["rates"], record["work"]
    peak = f"{rates['int8_gmacs']:.0f} GMAC/s int8" if rates.get("int8_gmacs") else "no int8 peak measured"
    lines = [f"{work['weights']}: {work['weight_bytes'] / 1e6:.1f} MB read per forward, "
             f"{work['macs_per_token'] / 1e6:.0f} M MACs per token; {rates['bandwidth_gbs']:.1f} GB/s read "
             f"(over {rates.get('read_mib', 256)} MiB), {peak}, "
             f"{rates['threads']} thread{'s' if rates['threads'] != 1 else ''}, context {record['context']}", "",
             "| n | t(n) ms | t(n) / t(1) | bandwidth floor ms | arithmetic floor ms | bound | t(n) / higher floor |",
             "|---|---|---|---|---|---|---|"]
    for row in record["rows"]:
        arithmetic = "" if row["arithmetic_floor_ms"] is None else f"{row['arithmetic_floor_ms']:.2f}"
        lines.append(f"| {row['n']} | {row['t_ms']:.2f} | {row['t_over_t1']:.2f} | {row['bandwidth_floor_ms']:.2f} | "
                     f"{arithmetic} | {row['bound']} | {row['over_floor']:.2f} |")
    return "\n".join(lines)
