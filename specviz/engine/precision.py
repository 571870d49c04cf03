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

Where q4 is a candidate and SpecViz's own 4-bit kernel is built here and passed its self-test
(`quant.own_kernel_problem`), `auto` is q4 from the first race, before anything is measured: the first
race runs at the precision the next one will (a fresh cache's first race in bf16 showed 2.1x, the next,
in q4, 1.1x). The measurement still runs, and its times are shown, but it confirms q4; it never flips it
away while the kernel is there (`choice(kernel=...)`).

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
KERNEL_Q4 = "q4"   # what `auto` runs where SpecViz's 4-bit kernel is built and self-tested
# Said while q4 was chosen for the kernel and the measurement has not run yet: the worker measures after
# such a race, as after one on the rule (`waits_for_measurement`).
UNCONFIRMED = "not timed against the other precisions on this CPU yet (measured after this race)"


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


def one_token_times(found: dict, names: list[str]) -> str:
    """"fp32 31.2 ms, bf16 40.1 ms, q4 18.0 ms": each precision's measured one-token forward."""
    return ", ".join(f"{name} {found['ms'][name][str(ROWS[0])]:.1f} ms" for name in names)


def kernel_words(kernel: str) -> str:
    """How the summary line names the reason q4 runs before and whatever the measurement says."""
    return f"auto: {KERNEL_Q4}, SpecViz's 4-bit kernel runs on this CPU ({kernel})"


def choice(target_name: str, names: list[str], kernel: str | None = None) -> tuple[str | None, str]:
    """(the precision `auto` loads, or None for the rule; the words the summary line shows).

    `kernel`: SpecViz's 4-bit kernel is built and self-tested here, in these words (`quant.KERNEL_WORDS`);
    with q4 among `names` it is q4 from the first race, and the measurement, once there, confirms it in its
    times without changing it (None: the rule until measured, then the fastest measured)."""
    if len(names) < 2:
        return None, ""
    found = cached(target_name, names)
    if kernel and KERNEL_Q4 in names:
        words = kernel_words(kernel)
        if found is None:
            return KERNEL_Q4, f"{words}; {UNCONFIRMED}"
        times = one_token_times(found, names)
        if found["chosen"] == KERNEL_Q4:
            return KERNEL_Q4, f"{words}, and the fastest measured here (one token's forward: {times})"
        return KERNEL_Q4, (f"{words}; measured here, {found['chosen']} came out faster (one token's forward: "
                           f"{times}), but auto keeps q4 while the kernel runs, so one race's precision is the "
                           f"next one's (ask for {found['chosen']} to race it)")
    if found is None:
        return None, NOT_MEASURED + ", so the rule ran (bf16 where the CPU has bf16 kernels, else fp32)"
    chosen = found["chosen"]
    return chosen, f"auto: {chosen}, the fastest measured on this CPU (one token's forward: {one_token_times(found, names)})"


def waits_for_measurement(words: str) -> bool:
    """Whether a race's precision words (`choice`) say this CPU's precisions are still to be measured."""
    return words.startswith(NOT_MEASURED) or UNCONFIRMED in words


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
