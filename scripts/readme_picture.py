#!/usr/bin/env python
"""The README's picture: today's default race, as a newcomer's Chromium shows it after one race.

Serves the app with the page's own defaults (`RaceRequest()`: its prompt, `auto` precision and sizes, the
worker), opens it in Chromium at 1280 x 900, presses ▶ Start race, waits for the summary, and saves the race
columns and the summary to `docs/img/race.png`; prints the speedups and the precision the summary shows, for the
picture's alternative text in README.md. A machine that has not measured its `auto` sizes yet races at first
sizes while the worker measures (as a newcomer's first race does); run it once more for the sizes a second race
gets.

    .venv/bin/python scripts/readme_picture.py [--out docs/img/race.png]
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "race.png")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from specviz.ui import build_demo, launch_kwargs

    demo, port = build_demo(worker=True), _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs())
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"http://127.0.0.1:{port}/", wait_until="load", timeout=120_000)
                page.wait_for_selector("#sv-run", timeout=120_000)
                page.locator("#sv-run").click()
                page.wait_for_selector("#sv-summary .sv-summary", timeout=600_000)
                page.wait_for_timeout(1500)   # the views' last update
                top = page.locator("#sv-run-row").bounding_box()
                bottom = page.locator("#sv-summary").bounding_box()
                page.screenshot(path=str(args.out), full_page=True,
                                clip={"x": 0, "y": top["y"], "width": 1280,
                                      "height": bottom["y"] + bottom["height"] - top["y"] + 8})
                summary = page.locator("#sv-summary").inner_text()
                status = page.locator("#sv-status").inner_text()
            finally:
                browser.close()
    finally:
        demo.close()
    print(f"wrote {args.out}")
    print("summary:", re.sub(r"\s+", " ", summary)[:600])
    print("status:", re.sub(r"\s+", " ", status)[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
