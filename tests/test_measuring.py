"""Progress while this machine is measured for `auto` sizes, and the gate that pauses a background
measurement between two forwards (issue 53). Pure parts first, then the command line on the real model."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specviz.engine import measuring
from specviz.engine.measuring import Measuring

ROOT = Path(__file__).resolve().parent.parent


def test_phases_and_ticks_report_what_how_far_and_the_time_left():
    reports = []
    reporter = Measuring(report=reports.append, interval_s=0.0)
    with measuring.measuring(reporter):
        measuring.phase("forward times", 4)
        for _ in range(4):
            time.sleep(0.01)
            measuring.tick()
        measuring.phase("step costs", 2)
        measuring.tick()
    assert measuring.current() is None   # the block installs it for itself only
    first = [r for r in reports if r.what == "forward times"]
    assert [r.done for r in first] == [0, 1, 2, 3, 4] and all(r.part == 1 and r.total == 4 for r in first)
    assert first[0].left_s is None and first[1].left_s > first[3].left_s >= 0 and first[-1].left_s == 0
    second = [r for r in reports if r.what == "step costs"]
    assert second[0].part == 2 and second[-1].done == second[-1].total   # a phase left unfinished is closed
    assert reports[-1] is second[-1] and second[-1].to_dict()["what"] == "step costs"


def test_nothing_installed_is_a_no_op_and_each_thread_sees_its_own():
    measuring.phase("no one listens", 3)
    measuring.tick()
    reports = []
    seen_elsewhere = []
    with measuring.measuring(Measuring(report=reports.append, interval_s=0.0)):
        thread = threading.Thread(target=lambda: seen_elsewhere.append(measuring.current()))
        thread.start()
        thread.join()
        measuring.phase("mine", 1)
    assert seen_elsewhere == [None] and {r.what for r in reports} == {"mine"}


def test_a_closed_gate_holds_the_measurement_at_its_next_tick_and_the_wait_is_not_counted():
    gate = threading.Event()
    reporter = Measuring(gate=gate, interval_s=0.0, report=lambda p: None)
    done = []

    def measure():
        with measuring.measuring(reporter):
            measuring.phase("forward times", 3)
            for i in range(3):
                measuring.tick()
                done.append(i)

    thread = threading.Thread(target=measure)
    thread.start()
    assert reporter.paused.wait(5) and done == []   # held before its first unit counts
    time.sleep(0.3)
    gate.set()
    thread.join(5)
    assert done == [0, 1, 2] and not reporter.paused.is_set()
    assert reporter._progress().elapsed_s < 0.25   # the 0.3 s held at the gate is not working time


def test_the_cli_draws_a_bar_per_phase_and_says_where_results_went(tmp_path):
    from specviz.cliargs import CliMeasuring

    stream = io.StringIO()
    shown = CliMeasuring(stream=stream)
    with measuring.measuring(Measuring(report=shown.report, interval_s=0.0)):
        measuring.phase("SmolLM2's forward times, t(n) for n = 1..64", 5)
        for _ in range(5):
            measuring.tick()
        measuring.saved(tmp_path / "forward-x@2t-abcd.json")
    shown.finish()
    text = stream.getvalue()
    assert "specviz: measuring SmolLM2's forward times" in text and "5/5" in text
    assert f"1 result cached in {tmp_path}" in text


def _generate(cache: Path, *extra: str) -> subprocess.CompletedProcess:
    from helpers import empty_profile_cache

    env = dict(os.environ, SPECVIZ_CACHE=str(empty_profile_cache(cache)))
    return subprocess.run([sys.executable, "-m", "specviz", "generate", "--method", "lookahead", "--dtype", "fp32",
                           "--prompt", "Count from one to ten.", "--max-new-tokens", "4", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_cold_cli_run_shows_its_measuring_progress_on_stderr_and_quiet_silences_it(tmp_path):
    cold = _generate(tmp_path / "cold")
    assert cold.returncode == 0, cold.stderr
    assert "specviz: measuring SmolLM2-135M-Instruct (offline default)'s forward times, t(n) for n = 1..256" \
        in cold.stderr
    assert "81/81" in cold.stderr                      # 9 rounds of 9 sizes (Sequoia's, shared), counted to the end
    assert cold.stdout.strip()                          # the text itself is untouched, on stdout
    profiles = tmp_path / "cold" / "profiles"
    # A curve measured while other programs held the cores (a CI machine's other test worker) is used for
    # that run only, and the run says so instead of saying what it cached.
    contended = "not cached" in cold.stderr
    if not contended:
        assert f"2 results cached in {profiles}" in cold.stderr               # the curve and the choice
        assert len(list(profiles.glob("lookahead-auto-*.json"))) == 1
    else:
        assert "other programs held the cores" in cold.stderr and "cached in" not in cold.stderr
    quiet = _generate(tmp_path / "quiet", "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "measuring" not in quiet.stderr and "cached in" not in quiet.stderr
    if not contended:
        warm = _generate(tmp_path / "cold")             # measured already: nothing to show
        assert warm.returncode == 0 and "measuring" not in warm.stderr
