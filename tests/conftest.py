import os

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models: one thread (a 32-wide matmul split over busy cores mostly waits for the other thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def pair_fp32():
    """The real offline default (SmolLM2-135M-Instruct), fp32 for exactness tests, target as its own draft."""
    from specviz.engine.models import load_pair

    torch.manual_seed(0)
    return load_pair("default", "self", device="cpu", dtype="fp32")


_REAL_CACHE_ENV = "SPECVIZ_TEST_REAL_CACHE"


def _private_profile_cache() -> None:
    """Point $SPECVIZ_CACHE at a folder of this run's own, whose entries link to the real cache's (the converted
    model, the downloaded wheel) except `profiles/`.

    What `auto` and the adaptive tree read there (forward curves, plans, step costs, acceptance vectors,
    Lookahead's choice) was measured on whichever machine and load wrote it, and it changes what a decoder
    does: a test that left it to the user's ~/.cache/specviz ran other trees and windows on every machine.
    A test that wants a curve puts it in a tmp SPECVIZ_CACHE of its own (`helpers.cache_forward_curves`).
    Subprocesses (the CLI, the app's worker) inherit the variable. SPECVIZ_TEST_REAL_CACHE=1 keeps the real one.
    """
    import atexit
    import os
    import shutil
    import tempfile
    from pathlib import Path

    if os.environ.get(_REAL_CACHE_ENV) == "1":
        return
    real = Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")
    private = Path(tempfile.mkdtemp(prefix="specviz-test-cache-"))
    try:
        (real / "wheels").mkdir(parents=True, exist_ok=True)   # a first download is kept for the next run
        entries = list(real.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if entry.name != "profiles":
            (private / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    os.environ["SPECVIZ_CACHE"] = str(private)
    atexit.register(shutil.rmtree, private, ignore_errors=True)


def _share_the_cores() -> None:
    """Under pytest-xdist (`scripts/test.sh` runs the suite on one worker per core) each worker decodes on its
    own share of the cores, and so do the CLIs and app workers it starts: on 2 cores two workers of 2 OpenMP
    threads each stall at every barrier (the app's worker ran at 0.41x beside one busy core, see
    `runtime.worker.thread_policy`), while one thread each keeps both cores busy with useful work."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1:
        return
    from specviz.engine.machine import usable_cores

    threads = max(1, usable_cores() // workers)
    torch.set_num_threads(threads)
    for name in ("OMP_NUM_THREADS", "SPECVIZ_THREADS"):
        os.environ[name] = str(threads)


def pytest_configure(config):
    """SPECVIZ_MUTANT=name plants one of `mutants.MUTANTS` for the whole run (`scripts/mutation_check.py`);
    the profile cache is this run's own (`_private_profile_cache`); apps do not measure this machine in the
    background as they start (SPECVIZ_WARMUP=0: they race explicit sizes), except where a test asks."""
    _share_the_cores()
    _private_profile_cache()
    os.environ.setdefault("SPECVIZ_WARMUP", "0")
    name = os.environ.get("SPECVIZ_MUTANT")
    if name:
        import mutants

        mutants.apply(name)


@pytest.fixture()
def closed_races(monkeypatch):
    """Every `Race` closed in this process while the test runs (a race ended by Stop, a lost client or its
    clock is closed with its decoders cancelled)."""
    from specviz.runtime.race import Race

    closed: list = []
    original = Race.close

    def recording_close(self):
        original(self)
        closed.append(self)

    monkeypatch.setattr(Race, "close", recording_close)
    return closed
