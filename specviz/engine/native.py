"""SpecViz's one native kernel: Q4_1 weights times a few rows on an AVX-512 VNNI CPU (`csrc/q4_rows.cpp`).

torch ships no 4-bit product that rounds the activations to int8 in blocks, as llama.cpp's Q4_1
product does, and its own int4 kernel reads the weights again for every four rows of a tree. The
source is compiled here, on the machine that runs it (`-march=native`: the CPUs our sessions land on
differ), with the C++ compiler torch's own extensions use, against this torch's headers, into
`cache_dir()/native/<key>/` where the key names the source, torch and the CPU. `scripts/setup.sh`
builds it (`python -m specviz.engine.native`), so a race never waits for the compiler; a process that
finds no build compiles it once (about 10 s on 2 cores).

Where the CPU lacks AVX-512 VNNI, or no compiler is found, or the build fails, or the loaded library fails
its self-test (`self_test`: a small random Q4_1 block times a few rows, against the same product in torch),
`q4_rows_available` says why and the 4-bit path keeps torch's int4 kernel (`quant.Int4Linear`): the same
weights, slower. Where it is built and self-tested, `auto` precision runs q4 from the first race
(`engine.precision`, `KERNEL_WORDS`).
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
    return self_test()


# What the summary line says of a kernel that is built, loaded and passed `self_test` (`engine.precision`).
KERNEL_WORDS = "AVX-512 VNNI, self-tested"
# The self-test's block: whole tiles of 16 output rows, whole blocks of 32 along a row; the row counts cover
# the kernel's register tiles of 8, 4, 2 and 1 rows and what is left over. A few milliseconds, once a process.
SELF_TEST_SHAPE = (48, 256)
SELF_TEST_ROWS = (1, 3, 8, 13)
SELF_TEST_OUTLIER = 7   # an input position kept out of the int8 rounding, as `quant.calibrate_outliers` keeps some


def q8_1_rounded(x: torch.Tensor) -> torch.Tensor:
    """Rows as llama.cpp's quantize_row_q8_1 leaves them, back in fp64: per block of 32 along a row, one scale
    max|x| / 127 and codes rounded to int8 (what the kernel multiplies the weights' codes by)."""
    rows, cols = x.shape
    blocks = x.double().view(rows, cols // 32, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    inverse = torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))
    return ((blocks * inverse).round() * amax / 127).view(rows, cols)


def self_test(product=None) -> str | None:
    """None when the kernel computes Q4_1 weights times int8-rounded rows on this machine; else what went wrong.

    A random Q4_1 block (`quant.quantize_q4_1`) with one outlier input is multiplied by a few random rows, and
    compared with the plain fp64 product of its dequantised weights and the rows rounded as the kernel rounds
    them (`q8_1_rounded`; the outlier exact): the same sums in another order, so within a thousandth of the
    largest output (a wrong nibble order, a dropped min term, a skipped row are off by tens of percent). The
    product of the unrounded rows is checked too, within what rounding to 8 bits can move it. `product(x,
    linear)` stands in for the kernel's (`quant.Q4Rows.rows`) in the tests' negative controls."""
    from . import quant   # quant imports this module

    out, cols = SELF_TEST_SHAPE
    generator = torch.Generator().manual_seed(67)
    weight = quant.quantize_q4_1(torch.randn(out, cols, generator=generator) * 0.05)
    outliers = torch.tensor([SELF_TEST_OUTLIER], dtype=torch.int32)
    linear = quant.Q4Rows.of(weight, outliers)
    dense = weight.dequantize().double()
    product = product or (lambda x, module: module.rows(x))
    try:
        for rows in SELF_TEST_ROWS:
            x = torch.randn(rows, cols, generator=generator)
            x[:, SELF_TEST_OUTLIER] *= 40   # a large dimension, as SmolLM2's
            rest = x.clone()
            rest[:, SELF_TEST_OUTLIER] = 0
            want = q8_1_rounded(rest) @ dense.T + x[:, outliers.long()].double() @ dense[:, outliers.long()].T
            got = product(x, linear).double()
            if got.shape != want.shape:
                return f"failed its self-test: {tuple(got.shape)} outputs for {tuple(want.shape)}"
            error = (got - want).abs().max().item()
            if not error <= 1e-3 * want.abs().max().item():
                return f"failed its self-test: {rows} rows off by {error:.3g} (largest output {want.abs().max().item():.3g})"
            exact = x.double() @ dense.T
            if not (got - exact).abs().max().item() <= 0.02 * exact.abs().max().item():
                return f"failed its self-test: {rows} rows far from the unrounded product"
    except RuntimeError as exc:
        return f"failed its self-test: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    return None


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
        print(f"specviz: q4 kernel ready, {KERNEL_WORDS} ({library_path()})")
    else:
        print(f"specviz: q4 kernel not used here ({reason}); --dtype q4 runs torch's int4 kernel")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
