#!/usr/bin/env python
"""The README's picture: today's default race, as a newcomer's Chromium shows it after one race.

Serves the app with the page's own defaults (`RaceRequest()`: its prompt, `auto` precision and sizes, the
worker), opens it in Chromium at 1280 x 900, presses ▶ Start race, waits for the summary, and saves the race
columns and the summary to `docs/img/race.png`; prints the speedups and the precision the summary shows, for the
picture's alternative text in README.md. A machine that has not measured its `auto` sizes yet races at first
sizes while the worker measures (as a newcomer's first race does); the picture is of the race after that
measurement, what a second race and every later one shows (`--first` keeps the first race's).

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
    parser.add_argument("--first", action="store_true", help="picture the first race, even while measuring")
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
                if not args.first and page.locator("#sv-measuring .sv-measuring").count():
                    print("the worker is measuring this machine; racing again once it is done")
                    page.wait_for_function("!document.querySelector('#sv-measuring .sv-measuring')", timeout=1_800_000)
                    page.locator("#sv-run").click()
                    done = "(document.querySelector('#sv-status') || {innerText: ''}).innerText.startsWith('Done')"
                    page.wait_for_function(f"!{done}", timeout=60_000)   # the second race under way
                    page.wait_for_function(done, timeout=600_000)
                page.wait_for_timeout(1500)   # the views' last update
                # In page coordinates (a bounding box is the viewport's, and the race scrolled the page).
                top, bottom = (page.evaluate(f"(() => {{ const r = document.querySelector('{sel}')"
                                             ".getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY]; })()")
                               for sel in ("#sv-run-row", "#sv-summary"))
                page.screenshot(path=str(args.out), full_page=True,
                                clip={"x": 0, "y": top[0], "width": 1280, "height": bottom[1] - top[0] + 8})
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
