"""The draft formats SpecViz loads from a directory, by name, and which one a directory holds.

Like the methods (`methods.py`), each format is named by module path and imported on
first use, so the engine reaches every draft without importing any draft module: a
draft module registers by exposing a `DRAFT_FORMAT` and a line here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# format name -> "module:attribute" holding its DraftFormat; tried in this order on a directory.
DRAFT_FORMATS = {
    "feature": "specviz.draft.feature:DRAFT_FORMAT",        # EAGLE style: reads the target's hidden states
    "independent": "specviz.draft.pruned:DRAFT_FORMAT",     # layers cut from the target and distilled
}


@dataclass(frozen=True)
class DraftFormat:
    """How to recognise, load and name one kind of SpecViz draft directory."""

    is_dir: Callable[[str | Path | None], bool]
    load: Callable[[Any, str | Path], Any]   # (target model, directory) -> the draft model
    display_name: Callable[[str | Path], str]


def draft_format(name: str) -> DraftFormat:
    module_name, _, attribute = DRAFT_FORMATS[name].partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def format_of(path: str | Path | None) -> DraftFormat | None:
    """The format of the draft in `path`, or None where it holds no SpecViz draft."""
    if path is None:
        return None
    for name in DRAFT_FORMATS:
        fmt = draft_format(name)
        if fmt.is_dir(path):
            return fmt
    return None
