"""`auto` precision on a CPU: the one this machine runs fastest, measured once and cached.

A CPU's fastest precision is a property of the CPU, not of the model: on an AVX2 EPYC a bf16 forward
ran 3x slower than fp32 and the 4-bit weights (`q4`) faster than both; a Xeon with AMX runs bf16 fast.
So `auto` on a CPU times one target forward at each candidate precision, at 1 row (what `ar` runs)
and at `ROWS[-1]` rows (a tree or a window verified in one forward), and picks the smallest geometric
mean of the two: the baseline and the speculative step weigh alike. The result is cached per target
with the machine's fingerprint (CPU model and flags, thread count, torch version; `profiler.load_cached`),
so another thread count or another CPU measures its own.

Until that measurement exists, `auto` is the rule it replaces (bf16 where the CPU has bf16 kernels, else
fp32) and says so: the app's worker measures it in the background after the first race (as it does
`auto`'s sizes), and a command measures it before it loads (`models.ensure_precisions_measured`, which
knows the candidates and how to load a model at each). On a GPU `auto` stays the rule
(`models.choose_dtype`): bf16 from Ampere on, fp16 below.

Only fp32 is exact (the tests prove it there); a race on bf16 or q4 reports its greedy agreement with
`ar` instead. The summary line says which precision ran and why (`RaceTrace.precision_choice`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from . import measuring
from .profiler import forward_calls, load_cached, save_cached, timed_in_rounds, with_contention

KIND = "precision"    # the cache kind (`profiler.MACHINE_KINDS`)
ROWS = (1, 16)        # the forwards timed: one decoding row, and a speculative step's verification
REPEATS = 5
NOT_MEASURED = "auto: this CPU's precisions are not measured yet"


def _key(target_name: str) -> str:
    return f"{target_name}|cpu"


def cached(target_name: str, names: list[str]) -> dict | None:
    """This machine's measurement for the target ({"ms": {precision: {rows: ms}}, "chosen": ...}) among
    `names`, else None (also when it lacks one of them: measured under another torch, say)."""
    if len(names) < 2:
        return None
    found = load_cached(KIND, _key(target_name))
    if not found or found.get("chosen") not in names or not set(names) <= set(found.get("ms", {})):
        return None
    return found


def pending(target_name: str, names: list[str]) -> bool:
    """Whether `auto` still waits for this machine's measurement (measures nothing)."""
    return len(names) >= 2 and cached(target_name, names) is None


def fastest(ms: dict[str, dict]) -> str:
    """The precision with the smallest geometric mean of its timed forwards (ties: the first listed)."""
    def score(name: str) -> float:
        times = [float(t) for t in ms[name].values()]
        return math.exp(sum(math.log(max(t, 1e-9)) for t in times) / len(times))

    return min(ms, key=score)


def choice(target_name: str, names: list[str]) -> tuple[str | None, str]:
    """(the precision `auto` loads, or None for the rule; the words the summary line shows)."""
    if len(names) < 2:
        return None, ""
    found = cached(target_name, names)
    if found is None:
        return None, NOT_MEASURED + ", so the rule ran (bf16 where the CPU has bf16 kernels, else fp32)"
    chosen = found["chosen"]
    times = ", ".join(f"{name} {found['ms'][name][str(ROWS[0])]:.1f} ms" for name in names)
    return chosen, f"auto: {chosen}, the fastest measured on this CPU (one token's forward: {times})"


@torch.inference_mode()
def measure(target_name: str, names: list[str], load: Callable[[str], torch.nn.Module],
            device: torch.device) -> dict:
    """Time one forward of `load(name)` for every name (`ROWS`), choose, and cache.

    The precisions are timed in rounds, one forward of each per round, so a machine that slows down for
    a while slows them alike: the choice compares them, so it is kept even when other programs held the
    cores (their share of the time is recorded beside it)."""
    models, calls = [], {}
    for name in names:
        models.append(load(name))   # held until every precision is timed
        for rows, call in forward_calls(models[-1], list(ROWS)).items():
            calls[(name, rows)] = call
    measuring.phase("the target's forward in " + ", ".join(names), (REPEATS + 1) * len(calls))
    times, waiting = with_contention(lambda: timed_in_rounds(calls, device, REPEATS, warmup=1), device)
    ms = {name: {str(rows): round(times[(name, rows)], 3) for rows in ROWS} for name in names}
    found = {"ms": ms, "chosen": fastest(ms), "rows": list(ROWS), "waiting_share": waiting}
    save_cached(KIND, _key(target_name), found)
    return found
