"""The workshop kit: the handout prints on one A4 sheet, and the guide answers every preset the page offers.

The handout is printed the way docs/workshop.md says to print it (scripts/handout_pdf.py: Chromium through
Playwright); the same printer gives two sheets for the handout twice over, so a one-page result is a
measurement, not a constant.
"""

from __future__ import annotations

import importlib.util
import re
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


# -- the figures the guide and the handout quote ------------------------------------------------------------

FIGURES = ROOT / "docs" / "workshop-figures.md"
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\d.])")


def _presets_script():
    """scripts/workshop_presets.py, which writes the figures and reads them back (`read_figures`, `MARK`)."""
    spec = importlib.util.spec_from_file_location("workshop_presets", ROOT / "scripts" / "workshop_presets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("workshop_presets", module)
    spec.loader.exec_module(module)
    return module


PRESETS_SCRIPT = _presets_script()
MARK = PRESETS_SCRIPT.MARK   # groups: the quoted number, the mark, its key


def _generated() -> dict:
    return PRESETS_SCRIPT.read_figures(FIGURES)


def _figure_problems(text: str, figures: dict) -> list[str]:
    """Every marked figure that is not the generated one (at the decimals quoted), and every mark whose key
    the generated file lacks."""
    problems = []
    for match in MARK.finditer(text):
        quoted, key = match.group(1), match.group(3)
        if key not in figures:
            problems.append(f"{key}: not a generated figure")
            continue
        value = figures[key]
        places = len(quoted.split(".")[1]) if "." in quoted else 0
        if not isinstance(value, (int, float)) or isinstance(value, bool) or round(float(value), places) != float(quoted):
            problems.append(f"{key}: quoted {quoted}, generated {value}")
    return problems


def _unmarked(text: str) -> list[str]:
    """Decimal numbers in the guide's "On this CPU" lines that carry no mark."""
    out = []
    for line in re.findall(r"- \*\*On this CPU\*\*.*?(?=\n- \*\*|\n#|\Z)", text, flags=re.S):
        bare = MARK.sub("", line)
        out += [f"{number} in: {line[:60]}" for number in DECIMAL.findall(bare)]
    return out


def test_every_figure_the_guide_and_handout_quote_is_the_generated_one():
    generated = _generated()
    figures = PRESETS_SCRIPT.keyed_figures(generated)
    guide, handout = GUIDE.read_text(encoding="utf-8"), HANDOUT.read_text(encoding="utf-8")
    assert len(MARK.findall(guide)) >= 3 * len(WORKSHOP) and MARK.findall(handout)
    assert _figure_problems(guide, figures) == [] and _figure_problems(handout, figures) == []
    assert _unmarked(guide) == []
    # The control: a quote one digit off, a mark naming no figure and an unmarked figure are each found.
    key, value = next((k, v) for k, v in figures.items() if k.endswith("sequoia.tokens_per_forward"))
    assert _figure_problems(f"{value + 0.01:.2f}<!--fig {key}-->", figures)
    assert _figure_problems("1.00<!--fig 99.sequoia.nothing-->", figures)
    assert _unmarked("- **On this CPU** (q4). Sequoia 2.53 tokens per forward.\n")


def test_the_generated_figures_are_of_the_presets_the_page_offers_today():
    """Change a preset's prompt, precision or sizes and the guide's figures are stale: regenerate them."""
    from specviz.request import DEFAULT_PRESET, PRESETS
    from specviz.ui.handlers import preset_settings

    generated = _generated()
    assert list(generated["presets"]) == [str(n) for n in range(1, len(WORKSHOP) + 1)]
    for number, name in enumerate(WORKSHOP, start=1):
        recorded = generated["presets"][str(number)]
        today = preset_settings(name, DEFAULT_PRESET, list(PRESETS), q4_here=True)
        today.pop("question"), today.pop("runs")
        assert recorded["name"] == name and recorded["settings"] == today, name
        assert recorded["figures"]["precision"] == WORKSHOP[name]["dtype"], name
    header = generated["generated"]
    assert header["command"].startswith("python scripts/workshop_presets.py --write")
    assert header["date"] and header["machine"]
