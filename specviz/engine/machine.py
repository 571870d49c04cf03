"""What a measured cost depends on besides the model: the CPU, its features, the thread count, torch.

Sessions and Spaces land on different x86 machines (an AMD EPYC, an Intel Xeon with AMX), and the app's
decoding worker runs fewer threads than `bench` on a 2-core machine. A forward-time curve measured on one
of these sizes trees and windows wrongly on another (a 1-thread curve read by a 2-thread run made
Sequoia's trees too small), so every cached cost carries the `fingerprint` it was measured under and is
read back only under the same one (`profiler.load_cached`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path

import torch

# The CPU features that change which kernels torch runs, and so what a forward costs: AVX-512 and its
# bf16 dot products (oneDNN's bf16 GEMMs), VNNI's int8 dot products (fbgemm's int8 GEMMs; without them its
# u8 x s8 pairs sum in 16 bits and may saturate), AMX tiles (Intel's matrix unit), AVX2/FMA (the baseline).
FLAGS_OF_NOTE = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16",
                 "amx_int8")


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, by id (its affinity, which a container or `taskset` narrows)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """How many CPUs this process may run on (`usable_cpus`)."""
    return len(usable_cpus())


@functools.cache   # the CPU does not change under a running process
def cpu_model() -> str:
    """The CPU's model name as `lscpu` prints it ('AMD EPYC', 'Intel(R) Xeon(R) Platinum 8481C ...')."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown CPU"


@functools.cache
def all_cpu_flags() -> frozenset[str]:
    """Every flag /proc/cpuinfo lists for this CPU (empty where it cannot be read)."""
    return frozenset((_cpuinfo_field("flags") or "").split())


def cpu_flags() -> list[str]:
    """This CPU's `FLAGS_OF_NOTE` (from /proc/cpuinfo; empty where it cannot be read)."""
    return [f for f in FLAGS_OF_NOTE if f in all_cpu_flags()]


def cpu_words(threads: int | None = None) -> str:
    """'AMD EPYC (avx2, fma, avx512f), 2 threads': what every reported figure is printed beside."""
    threads = torch.get_num_threads() if threads is None else threads
    flags = ", ".join(cpu_flags())
    plural = "s" if threads != 1 else ""
    return f"{cpu_model()}" + (f" ({flags})" if flags else "") + f", {threads} thread{plural}"


def fingerprint(device_type: str = "cpu") -> dict:
    """What a measured cost on this machine depends on, as plain data.

    The thread count is this process's (`torch.get_num_threads()`), so the app's worker and `bench`
    measure and read under their own counts. On a GPU the card's name joins it (the host's CPU and
    threads still launch every kernel)."""
    out = {"cpu": cpu_model(), "flags": cpu_flags(), "threads": torch.get_num_threads(), "torch": torch.__version__}
    if device_type == "cuda" and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    return out


def fingerprint_tag(print_: dict) -> str:
    """A short file-name tag for a fingerprint: the thread count readable ('2t'), the rest hashed."""
    rest = "|".join(f"{k}={print_[k]}" for k in sorted(print_) if k != "threads")
    return f"{print_['threads']}t-{hashlib.sha1(rest.encode()).hexdigest()[:8]}"


def machine_words(device) -> str:
    """What a race's speeds were measured on: the GPU's name, else `cpu_words` at this process's threads."""
    if getattr(device, "type", str(device)) == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    return cpu_words()
