#!/usr/bin/env bash
# Create or reuse the local virtual environment, install the pinned packages and
# SpecViz itself in editable mode (skipped when the requirement files and
# pyproject.toml have not changed), and fetch the offline default model.
# `setup.sh dev` adds the test tools, Debian's Chromium and the llama.cpp peer (below);
# `setup.sh llama` adds only the llama.cpp peer to the app's setup.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
case "$mode" in run|dev|llama) ;; *) echo "setup: unknown mode '$mode' (run, dev or llama)" >&2; exit 2 ;; esac

# llama.cpp, the peer `bench --methods ar,llama-cpp,llama-cpp-lookup` races (pyproject's extra
# `llama-cpp` pins the version). PyPI ships it as source only, so it is built here (about 7 min on
# 2 cores) into a wheel cached under the SpecViz cache, per version and flags: a second setup
# installs that wheel. The flags, the one place they are set: a build for this CPU's x86-64 features,
# chosen from /proc/cpuinfo, not `GGML_NATIVE`. The default native build compiled AMX kernels on an Intel
# Xeon that crashed in its first decode, so AMX stays off; AVX-512 (with its VBMI, VNNI and BF16 parts) is
# on where the CPU has it: on a Zen 4 EPYC an AVX-512 build decoded 1.1x faster than the AVX2 one, and a
# peer built below what the CPU runs flatters us. AVX2, FMA and F16C are what an AMD EPYC and any Xeon
# since Haswell both run. The wheel is cached per flags, and `bench` refuses a build whose features this
# CPU lacks (a .venv opened on another machine) with a message instead of an illegal instruction.
# (GGML_CPU_ALL_VARIANTS builds ~13 CPU backends, AMX's among them, and llama-cpp-python installs
# none of the variant libraries.) OpenMP off: ggml's own thread pool, so torch's OpenMP runtime is
# the only one in a bench's process (with OpenMP on, two threads on cores busy with other work
# crawled just the same: 0.3 tokens/s, both builds, here). No llava/mtmd: the peer decodes text.
cpu_has() {
  for flag in "$@"; do grep -qw "$flag" /proc/cpuinfo 2>/dev/null || return 1; done
}
on_if() {   # on_if OPTION flag...: -DOPTION=ON where the CPU has every flag, else OFF
  local option=$1; shift
  if cpu_has "$@"; then echo "-D$option=ON"; else echo "-D$option=OFF"; fi
}
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF $(on_if GGML_AVX512 avx512f avx512cd avx512vl avx512dq avx512bw) \
$(on_if GGML_AVX512_VBMI avx512f avx512vbmi) $(on_if GGML_AVX512_VNNI avx512f avx512_vnni) \
$(on_if GGML_AVX512_BF16 avx512f avx512_bf16) -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF"

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin="$candidate"; break; fi
  done
fi
if ! "$python_bin" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)'; then
  echo "setup: SpecViz needs Python 3.10 or newer (3.11 is what we test); found $("$python_bin" --version)" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$python_bin" --version)"
  "$python_bin" -m venv .venv
fi

# requirements-local.txt: the development pins (requirements.txt is the Space's, with the torch
# version ZeroGPU supports).
req=requirements-local.txt
[ "$mode" = dev ] && req=requirements-dev.txt
stamp=".venv/.installed-$mode-$(cat requirements-local.txt requirements-dev.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing $req into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # torch is pinned to 2.13.0: our machines' pip configuration offers its CPU
  # wheel; elsewhere PyPI's Linux build bundles CUDA (several GB, what a GPU wants).
  .venv/bin/python -m pip install --disable-pip-version-check -r "$req"
  # The package itself, editable (the checkout stays the code that runs): adds the
  # `specviz` command to .venv/bin. Its dependencies are the ones just installed.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
  touch "$stamp"
fi

# Download and convert the offline default once (prints its progress).
.venv/bin/python -m specviz fetch-model >/dev/null

# SpecViz's own 4-bit kernel (specviz/engine/csrc/q4_rows.cpp), compiled once for this CPU (about 10 s) where it
# has AVX-512 VNNI, with the C++ compiler torch's own extensions use. Not fatal: without it `--dtype q4` runs
# torch's int4 kernel, and the command says why.
if ! command -v g++ >/dev/null 2>&1 && grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing Debian's g++ to build SpecViz's q4 kernel"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null || true
fi
.venv/bin/python -m specviz.engine.native

if [ "$mode" = dev ]; then
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing Debian's chromium for the browser tests"
      if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
        echo "setup: could not install chromium; the browser test will skip (and fail under CI)" >&2
      fi
    else
      echo "setup: chromium not found and apt-get not usable; the browser test will skip" >&2
    fi
  fi
fi

# The llama.cpp peer (dev and llama): from the cached wheel, else built once. A failed build is
# not fatal: the peer test skips outside CI (and fails under CI), `bench` says how to install it.
install_llama() {
  local pin tag wheels built
  pin=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llama-cpp"][0])')
  tag="$(echo "$pin $LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
  wheels="${SPECVIZ_CACHE:-$HOME/.cache/specviz}/wheels/llama-cpp-$tag"
  if .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('llama-cpp-python') == '${pin#*==}' else 1)" 2>/dev/null \
     && [ -f ".venv/.llama-$tag" ]; then
    return 0
  fi
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's cmake and g++ to build llama.cpp"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null || true
      fi
    fi
    echo "setup: building $pin from source (about 7 min on 2 cores), once; flags: $LLAMA_CMAKE_ARGS"
    mkdir -p "$(dirname "$wheels")"
    built=$(mktemp -d "$wheels.building-XXXX")
    # --no-cache-dir: pip caches a wheel it built from an sdist by the sdist alone, not by CMAKE_ARGS, so a
    # second build with other flags silently got the first one's (an "AVX-512" wheel without one AVX-512 op).
    if ! CMAKE_ARGS="$LLAMA_CMAKE_ARGS" .venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps \
         --no-cache-dir --no-binary llama-cpp-python -w "$built" "$pin"; then
      echo "setup: could not build $pin; the llama.cpp peer test will skip (and fail under CI)" >&2
      rm -rf "$built"
      return 0
    fi
    rm -rf "$wheels" && mv "$built" "$wheels"   # whole, or not at all
  fi
  echo "setup: installing $pin from $wheels"
  # Uninstalled first: pip installs nothing over the same version, so a .venv holding a build with other flags
  # would keep it. (--force-reinstall would reinstall its dependencies too, numpy among them, unpinned.)
  .venv/bin/python -m pip uninstall -q -y llama-cpp-python >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check "$wheels"/llama_cpp_python-*.whl
  rm -f .venv/.llama-*
  touch ".venv/.llama-$tag"
}
if [ "$mode" = dev ] || [ "$mode" = llama ]; then
  install_llama
fi
