#!/usr/bin/env bash
# Create or reuse the local virtual environment, install the pinned packages and
# SpecViz itself in editable mode (skipped when the requirement files and
# pyproject.toml have not changed), and fetch the offline default model.
# `setup.sh dev` adds the test tools and Debian's Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"

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
