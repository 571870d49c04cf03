#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it (after `setup.sh dev`).
#
# Most tests are one Python thread driving a small model, a server or a browser, so the suite runs on one
# pytest-xdist worker per core (each worker's torch, CLIs and app workers on its share of the cores:
# tests/conftest.py), a test file per worker at a time so that a file's shared fixtures (a served app, a
# loaded pair, the presets' races) are built once. Tests that time what a visitor sees (the first race's
# seconds to the first token) are marked `alone` and run afterwards with the machine to themselves.
# Extra arguments go to both runs (e.g. `-x`, `-k name`); run one file by hand with
# `.venv/bin/python -m pytest tests/test_x.py`.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
workers=$(nproc)   # the cores this process may use (its affinity), at most 4
[ "$workers" -gt 4 ] && workers=4
status=0
"$py" -m pytest -n "$workers" --dist loadfile -m "not alone" "$@" || status=$?
# A selection with no `alone` test in it exits 5 (nothing collected): that is not a failure here.
"$py" -m pytest -m alone "$@" || { rc=$?; [ "$rc" = 5 ] || status=$rc; }
exit "$status"
