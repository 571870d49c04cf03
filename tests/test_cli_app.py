"""`specviz app`: the installed package serves the app without the repository's app.py.

The command runs from a wheel installed away from the checkout (app.py is not in the wheel), on a
free port, and answers one HTTP GET of the page; then it is stopped.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import package_source

ROOT = Path(__file__).resolve().parents[1]
STARTUP_S = 180   # importing gradio and torch on a shared 2-core machine


def test_app_help_names_its_options():
    out = subprocess.run([sys.executable, "-m", "specviz", "app", "--help"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    for option in ("--host", "--port", "--share", "--hosted"):
        assert option in out


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package as `pip install .` leaves it (no dependencies: they are this venv's), in a folder of its own."""
    base = tmp_path_factory.mktemp("installed")
    src = package_source(base)
    site = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(src)], check=True, cwd=base)
    assert not (site / "app.py").exists()
    return site


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, deadline: float, proc: subprocess.Popen) -> str:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"specviz app exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.read().decode("utf-8", "replace")
        except OSError:
            time.sleep(1)
    raise AssertionError(f"no page at {url} within {STARTUP_S} s")


def _stop(proc: subprocess.Popen) -> None:
    """The app and any race worker it started (its own session, so its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def test_installed_package_serves_the_app(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECVIZ_ASSETS", "SPECVIZ_HOSTED")}
    env |= {"PYTHONPATH": str(installed), "GRADIO_ANALYTICS_ENABLED": "False"}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specviz", "app", "--port", str(port), "--hosted"], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        page = _get(f"http://127.0.0.1:{port}/", time.monotonic() + STARTUP_S, proc)
    finally:
        _stop(proc)
    assert "SpecViz" in page and "gradio" in page.lower()
