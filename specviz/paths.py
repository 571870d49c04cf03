"""Where SpecViz finds its shipped files and keeps its caches.

- `assets_dir()`: prompt suites, the offline draft, measured acceptance vectors.
  In a checkout they are the repository's `assets/` folder.
- `cache_dir()`: converted models, measured forward-time profiles and plans,
  distillation work (`$SPECVIZ_CACHE`, else `~/.cache/specviz`).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def assets_dir() -> Path:
    return REPO_ROOT / "assets"


def cache_dir() -> Path:
    """Where SpecViz keeps converted models and profiles (SPECVIZ_CACHE overrides)."""
    root = os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
