#!/usr/bin/env bash
# The exactness tests under the Space's torch: requirements.txt pins the version ZeroGPU supports
# (2.11.0), while our machines develop and run CI on 2.13.0 (requirements-local.txt). This builds a
# second environment, .venv-space, from requirements.txt and runs the decoders' exactness and sampling
# tests in it. PyPI's torch 2.11.0 for Linux is the CUDA build (about 4.5 GB with NVIDIA's runtime
# packages); it runs these tests on the CPU. Extra arguments go to pytest.
#   bash scripts/space_torch_check.sh            # about 15 minutes on our 2-core machines
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-python3}"
[ -x .venv-space/bin/python ] || "$python_bin" -m venv .venv-space
.venv-space/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt pytest scipy
.venv-space/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
.venv-space/bin/python -c 'import torch; print("torch", torch.__version__)'
.venv-space/bin/python -m specviz fetch-model >/dev/null
.venv-space/bin/python -m pytest -q -p no:cacheprovider \
  tests/test_foundation.py tests/test_sequoia.py tests/test_lookahead.py tests/test_verification.py \
  tests/test_feature_draft.py tests/test_draft.py tests/test_lean.py \
  -k "exact or greedy or equal or identical or chi or distribution or sampl" "$@"
