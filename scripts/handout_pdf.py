#!/usr/bin/env python
"""Print the workshop handout (docs/workshop-handout.md) to an A4 PDF with Chromium, and count its pages.

The Markdown is rendered with markdown-it (gradio's own Markdown parser) into one HTML page with a print
style sheet, and Chromium prints it through Playwright (the test tools: `pip install -e ".[dev]"`, and a
Chromium, e.g. Debian's `chromium`). tests/test_workshop.py fails when the handout no longer fits one sheet.

    python scripts/handout_pdf.py --out handout.pdf
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANDOUT = ROOT / "docs" / "workshop-handout.md"
CHROMIUM = "/usr/bin/chromium"

PRINT_CSS = """
@page { size: A4; margin: 12mm 13mm; }
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 9pt; line-height: 1.28; color: #111; }
h1 { font-size: 14pt; margin: 0 0 4pt; }
p, ul, ol { margin: 0 0 4pt; }
ul, ol { padding-left: 14pt; }
li { margin: 0 0 1pt; }
table { border-collapse: collapse; margin: 0 0 4pt; width: 100%; }
th, td { border: 0.5pt solid #999; padding: 1.5pt 4pt; text-align: left; vertical-align: top; }
code { font-size: 8.5pt; }
"""


def handout_html(markdown: str) -> str:
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{PRINT_CSS}</style></head><body>{body}</body></html>"


def pdf_bytes(html: str, chromium: str = CHROMIUM) -> bytes:
    """The page printed on A4 by Chromium (headless), as PDF bytes."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page()
            page.set_content(html)
            return page.pdf(format="A4", print_background=True, prefer_css_page_size=True)
        finally:
            browser.close()


def page_count(pdf: bytes) -> int:
    """Pages in a PDF Chromium wrote: its page objects (`/Type /Page`, not the `/Pages` tree)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("workshop-handout.pdf"), help="the PDF to write")
    parser.add_argument("--chromium", default=CHROMIUM, help="the Chromium executable")
    args = parser.parse_args(argv)
    if not Path(args.chromium).exists():
        print(f"error: no Chromium at {args.chromium} (apt-get install chromium, or --chromium PATH)", file=sys.stderr)
        return 2
    pdf = pdf_bytes(handout_html(HANDOUT.read_text(encoding="utf-8")), args.chromium)
    args.out.write_bytes(pdf)
    pages = page_count(pdf)
    print(f"{args.out}: {pages} A4 page{'s' if pages != 1 else ''}")
    return 0 if pages == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
