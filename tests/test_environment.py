"""Every environment variable the package reads is listed once, in `specviz/environment.py`, and documented."""

from __future__ import annotations

import re
from pathlib import Path

from specviz import environment

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bSPECVIZ_[A-Z0-9_]+\b")


def names_read(paths) -> set[str]:
    return {name for path in paths for name in NAME.findall(path.read_text(encoding="utf-8"))}


def test_every_variable_the_package_reads_is_listed_and_nothing_listed_is_unread(tmp_path):
    sources = [p for p in (ROOT / "specviz").rglob("*.py") if p.name != "environment.py"] + [ROOT / "app.py"]
    read = names_read(sources)
    assert read - environment.names() == set(), "read but not listed in specviz/environment.py"
    assert environment.names() - read == set(), "listed but read nowhere"
    # The control: a module reading a variable the list lacks is found.
    module = tmp_path / "new_module.py"
    module.write_text('import os\nLIMIT = os.environ.get("SPECVIZ_NEW_LIMIT", "3")\n')
    assert names_read(sources + [module]) - environment.names() == {"SPECVIZ_NEW_LIMIT"}


def test_the_docs_table_is_the_generated_one_and_each_row_points_to_a_page():
    text = (ROOT / "docs" / "app.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- switches -->\n(.*?)\n<!-- /switches -->", text, flags=re.S)
    assert table and table.group(1) == environment.markdown_table(), \
        "docs/app.md's table is stale: paste environment.markdown_table()"
    for switch in environment.SWITCHES:
        assert (ROOT / "docs" / switch.page).is_file(), switch
