"""Mutation check of the exactness core: plant each named bug alone and check that the tests catch it.

Every mutant in `tests/mutants.py` (a plausible one-line bug in verification, the tree's mask or
positions, cache compaction or the sampler) is planted for one pytest run (SPECVIZ_MUTANT, read by
tests/conftest.py) over the tests chosen to catch it below. A mutant is killed when at least one of them
fails; the script prints a table mutant -> failing tests and exits non-zero when a mutant survives, or
when one cannot be planted (its target moved: re-point it in tests/mutants.py).

    python scripts/mutation_check.py                  # every mutant, its narrowed selection
    python scripts/mutation_check.py --wide           # every mutant, all sampling/exactness tests
    python scripts/mutation_check.py no-residual      # one mutant
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from mutants import MUTANTS  # noqa: E402

VERIFY_RULES = ["tests/test_verification.py", "-k", "enumeration or by_sampling or rule_is_exact"]
LOOKAHEAD_WALK = ["tests/test_lookahead_static.py", "-k", "device_sampled_verdict_is_exact"]
GREEDY_SEQUOIA = ["tests/test_sequoia.py", "-k", "greedy_equals_autoregressive and (chain or dp8)"]
# The tests each mutant is run against: narrow enough to be quick, chosen so a killed mutant says which
# kind of test guards that part of the core.
SELECTIONS = {
    "no-residual": VERIFY_RULES,
    "rejected-left-in-q": VERIFY_RULES,
    "bonus-from-raw-target": VERIFY_RULES,
    "tree-positions-off-by-one": GREEDY_SEQUOIA,
    "tree-mask-skips-self": GREEDY_SEQUOIA,
    "kv-keeps-rejected-slot": GREEDY_SEQUOIA,
    "host-walk-wrong-child": GREEDY_SEQUOIA,
    "host-verdict-off-by-one": ["tests/test_lookahead.py", "tests/test_prompt_lookup.py", "-k",
                                "greedy_equals_autoregressive"],
    "lookahead-device-fallback-raw-p": LOOKAHEAD_WALK,
    "lookahead-device-accept-raw-p": LOOKAHEAD_WALK,
    "race-sample-flattened": ["tests/test_sampling_exact.py", "-k", "sync_free_draw"],
    # The chi-square families whose steps graft a copied chain, and verify one alone.
    "copy-accepted-outright": ["tests/test_sampling_exact.py", "-k",
                               "test_sampling_is_exact and sequoia-copied and not alone"],
    "copy-accepted-outright-alone": ["tests/test_sampling_exact.py", "-k",
                                     "test_sampling_is_exact and sequoia-copied-alone"],
    "sampler-ignores-temperature": ["tests/test_sampling_exact.py", "-k", "test_sampling_is_exact and ar and T0.6"],
    "checkout-shares-a-session": ["tests/test_workshop_room.py", "-k", "keep_their_own_decoding_state"],
}
WIDE = ["tests", "-k", "(sampl or chi or distribution or exact or enumeration) and not negative_control"]


def run(mutant: str, selection: list[str], fail_fast: bool) -> tuple[str, list[str], float]:
    """(outcome, failing test ids, seconds) of one pytest run with `mutant` planted."""
    env = dict(os.environ, SPECVIZ_MUTANT=mutant)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *selection]
    if fail_fast:
        cmd.append("-x")
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - began
    failed = re.findall(r"^FAILED (\S+(?:\[[^\]]*\])?)", proc.stdout, flags=re.M)
    if proc.returncode == 0:
        return "SURVIVED", [], seconds
    if proc.returncode == 1 and failed:
        return "killed", failed, seconds
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
    return f"ERROR (pytest exit {proc.returncode})", tail, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mutants", nargs="*", help="names from tests/mutants.py (default: all)")
    parser.add_argument("--wide", action="store_true", help="run every sampling/exactness test, not the narrowed set")
    parser.add_argument("--all-failures", action="store_true", help="do not stop at a mutant's first failing test")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.mutants or m.name in args.mutants]
    unknown = set(args.mutants) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants: {sorted(unknown)}")
    rows, survivors = [], 0
    unselected = [m.name for m in chosen if m.name not in SELECTIONS]
    if unselected and not args.wide:
        parser.error(f"no tests are chosen for {unselected}: add them to SELECTIONS (or run --wide)")
    for mutant in chosen:
        selection = WIDE if args.wide else SELECTIONS[mutant.name]
        outcome, failed, seconds = run(mutant.name, selection, fail_fast=not args.all_failures)
        survivors += outcome != "killed"
        rows.append((mutant, outcome, failed, seconds, selection))
        print(f"{mutant.name}: {outcome} in {seconds:.0f} s", file=sys.stderr, flush=True)
    print("| mutant | target | bug | tests run | outcome | failing tests | s |")
    print("|---|---|---|---|---|---|---|")
    for mutant, outcome, failed, seconds, selection in rows:
        shown = "<br>".join(f.replace("|", "/") for f in failed[:4]) + (" ..." if len(failed) > 4 else "")
        print(f"| {mutant.name} | {mutant.module}.{mutant.function} | {mutant.bug} | `{' '.join(selection)}` "
              f"| {outcome} | {shown} | {seconds:.0f} |")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
