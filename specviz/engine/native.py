"""SpecViz's one native kernel: Q4_1 weights times a few rows on an AVX-512 VNNI CPU (`csrc/q4_rows.cpp`).

torch ships no 4-bit product that rounds the activations to int8 in blocks, as llama.cpp's Q4_1
product does, and its own int4 kernel reads the weights again for every four rows of a tree. The
source is compiled here, on the machine that runs it (`-march=native`: the CPUs our sessions land on
differ), with the C++ compiler torch's own extensions use, against this torch's headers, into
`cache_dir()/native/<key>/` where the key names the source, torch and the CPU. `scripts/setup.sh`
builds it (`python -m specviz.engine.native`), so a race never waits for the compiler; a process that
finds no build compiles it once (about 10 s on 2 cores).

Where the CPU lacks AVX-512 VNNI, or no compiler is found, or the build fails, `q4_rows_available` says why;
where the loaded library fails its self-test (`quant.self_test`: a small random Q4_1 block times a few rows,
against the same product in torch), `quant.own_kernel_problem` does. Either way the 4-bit path keeps torch's
int4 kernel (`kernels.Int4Linear`): the same weights, slower. Where it is built and self-tested, `auto`
precision runs q4 from the first race (`engine.precision`, `quant.KERNEL_WORDS`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import torch

from ..paths import cache_dir
from .machine import all_cpu_flags, cpu_model

SOURCE = Path(__file__).resolve().parent / "csrc" / "q4_rows.cpp"

# What the kernel's instructions need: 512-bit integer ops (AVX512F/BW), vpdpbusd (AVX512_VNNI), fp16
# scales widened in registers (F16C). Both x86 CPUs our sessions land on (Zen 4 EPYC, Sapphire Rapids
# Xeon) have them.
NEEDED_FLAGS = ("avx512f", "avx512bw", "avx512_vnni", "f16c")


def missing_flags(flags: frozenset[str] | set[str]) -> list[str]:
    return [f for f in NEEDED_FLAGS if f not in flags]


@functools.cache
def source_digest() -> str:
    """The kernel source's digest, short: what the measured costs of a forward on it are cached under (a changed
    kernel is measured afresh, `quant.WeightOnlyLayers.decoding_kind`)."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:8]


def build_key() -> str:
    """What the library depends on: its source, torch's version and ABI, the CPU it is compiled for."""
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), torch.__version__.encode(), str(torch._C._GLIBCXX_USE_CXX11_ABI).encode(),
                 cpu_model().encode(), " ".join(sorted(all_cpu_flags())).encode()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def library_path() -> Path:
    return cache_dir() / "native" / build_key() / "q4_rows.so"


def compile_command(output: Path) -> list[str]:
    from torch.utils import cpp_extension   # imports setuptools: only when compiling

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    includes = [flag for path in cpp_extension.include_paths() for flag in ("-I", path)]
    libraries = [flag for path in cpp_extension.library_paths() for flag in (f"-L{path}", f"-Wl,-rpath,{path}")]
    # -fopenmp: at::parallel_for splits the output rows over torch's threads through OpenMP pragmas in
    # its header, which a compiler without the flag ignores (one thread).
    return [compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++20",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *includes, str(SOURCE),
            "-o", str(output), *libraries, "-lc10", "-ltorch_cpu", "-ltorch"]


def build() -> Path:
    """The compiled library, compiled now if this machine has none. Raises RuntimeError with the compiler's
    last lines when the build fails."""
    target = library_path()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f"{target.stem}.{os.getpid()}.partial.so")
    result = subprocess.run(compile_command(staged), capture_output=True, text=True)
    if result.returncode != 0 or not staged.exists():
        staged.unlink(missing_ok=True)
        tail = "\n".join(result.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"compiling {SOURCE.name} failed:\n{tail}")
    os.replace(staged, target)   # atomic: two processes compiling at once leave one whole library
    return target


@functools.cache   # a loaded library stays loaded: torch.ops keeps its operators for the process
def q4_rows_available() -> str | None:
    """None when `torch.ops.specviz.q4_rows` is ready here (built and loaded); else why not, in a few words."""
    if os.environ.get("SPECVIZ_NO_NATIVE"):
        return "turned off by SPECVIZ_NO_NATIVE"
    if not sys.platform.startswith("linux"):
        return "built on Linux only"
    missing = missing_flags(all_cpu_flags())
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    try:
        torch.ops.load_library(str(build()))
    except (RuntimeError, OSError) as exc:
        return str(exc).strip().splitlines()[0]
    if not torch.ops.specviz.q4_rows_built():
        return "compiled without AVX-512 VNNI"
    return None


def logit_summary(logits: torch.Tensor, k: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of logits (n, V): the k largest of scale * logits (descending; index 0 the first maximum, the
    greedy token), their indices, and logsumexp(scale * logits), fp32. One op over fp32 CPU rows where the
    kernel is loaded (`torch.ops.specviz.logit_summary`: the logits read twice, not once per question);
    torch's max, topk and logsumexp elsewhere, with the same answers up to the sums' rounding."""
    if logits.dtype == torch.float32 and logits.device.type == "cpu" and q4_rows_available() is None:
        return torch.ops.specviz.logit_summary(logits, k, scale)
    scores = logits.float() if scale == 1.0 else logits.float() * scale
    best = scores.max(dim=-1)
    values, indices = best.values.unsqueeze(-1), best.indices.unsqueeze(-1)
    if k > 1:   # topk's order among equal values is its own: the greedy token is the first maximum, as `max` picks it
        top = scores.topk(k, dim=-1)
        values, indices = top.values, torch.cat([indices, top.indices[..., 1:]], dim=-1)
    return values, indices, scores.logsumexp(dim=-1)


class RowAttention(torch.nn.Module):
    """Attention for fp32 rows through `torch.ops.specviz.attend_rows`: each row over its own allowed keys in slot
    order, so a token's bits do not depend on how many rows share its forward (csrc/q4_rows.cpp says why).
    Stands in for `llama.Attention` in the 4-bit target's layers."""

    def forward(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: Optional[torch.Tensor],
                causal: bool, scale: float, groups: int) -> torch.Tensor:
        return torch.ops.specviz.attend_rows(q, keys, values, mask, causal, scale)

    @staticmethod
    def fits(head_dim: int) -> bool:
        return head_dim in (32, 64, 128)


def main() -> int:
    """`python -m specviz.engine.native`: build the kernel for this machine (scripts/setup.sh runs it)."""
    reason = q4_rows_available()
    if reason is None:
        print(f"specviz: q4 kernel built and loaded ({library_path()})")
    else:
        print(f"specviz: q4 kernel not used here ({reason}); --dtype q4 runs torch's int4 kernel")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
