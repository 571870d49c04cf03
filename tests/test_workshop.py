"""The workshop kit: the handout prints on one A4 sheet, and the guide answers every preset the page offers.

The handout is printed the way docs/workshop.md says to print it (scripts/handout_pdf.py: Chromium through
Playwright); the same printer gives two sheets for the handout twice over, so a one-page result is a
measurement, not a constant.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from specviz.ui.content import WORKSHOP

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "workshop.md"
HANDOUT = ROOT / "docs" / "workshop-handout.md"


def _printer():
    from test_browser import _need_browser

    _need_browser()
    spec = importlib.util.spec_from_file_location("handout_pdf", ROOT / "scripts" / "handout_pdf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("handout_pdf", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.browser
def test_the_handout_prints_on_one_a4_sheet():
    printer = _printer()
    markdown = HANDOUT.read_text(encoding="utf-8")
    assert printer.page_count(printer.pdf_bytes(printer.handout_html(markdown))) == 1
    # The control: the same printer and page count see a longer text spill onto a second sheet.
    assert printer.page_count(printer.pdf_bytes(printer.handout_html(markdown + "\n\n" + markdown))) == 2


def test_the_guide_and_the_handout_cover_every_preset_in_the_page_order():
    guide, handout = GUIDE.read_text(encoding="utf-8"), HANDOUT.read_text(encoding="utf-8")
    places = [guide.find(f"### {number}. {name}") for number, name in enumerate(WORKSHOP, start=1)]
    assert -1 not in places, [name for name, at in zip(WORKSHOP, places) if at < 0]
    assert places == sorted(places)
    for number in range(1, len(WORKSHOP) + 1):
        assert f"\n{number}. " in handout
