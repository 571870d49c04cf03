"""Where SpecViz finds its shipped files and keeps its caches.

- `assets_dir()`: prompt suites, the offline drafts, measured acceptance vectors.
  In a checkout they are the repository's `assets/` folder, which `specviz/assets`
  links to; a built wheel carries them as package data in `specviz/assets/`, so an
  installed package (not only a checkout) finds them. `$SPECVIZ_ASSETS` overrides both.
- `cache_dir()`: converted models, measured forward-time profiles and plans,
  distillation work (`$SPECVIZ_CACHE`, else `~/.cache/specviz`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def assets_dir() -> Path:
    """The folder holding `suites/`, `prompts/`, `acceptance/` and the `draft-*/` folders.

    In order: `$SPECVIZ_ASSETS`; the package's own `assets/` (a wheel's package data, or
    in a checkout the link to the repository's folder, resolved so paths read as
    `<repo>/assets/...`); the repository's `assets/` (a checkout where the link did not
    survive, e.g. git with `core.symlinks=false`).
    """
    override = os.environ.get("SPECVIZ_ASSETS")
    if override:
        return Path(override)
    packaged = PACKAGE_DIR / "assets"
    if packaged.is_dir():
        return packaged.resolve()
    return REPO_ROOT / "assets"


def cache_dir() -> Path:
    """Where SpecViz keeps converted models and profiles (SPECVIZ_CACHE overrides)."""
    root = os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_json(path: Path):
    """The JSON held in `path`, or None where there is no such file or it is damaged: a cached measurement is
    measured again, never fatal."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):   # ValueError: not JSON, or not UTF-8 text
        return None


def write_json(path: Path, data) -> None:
    """Write `data` as JSON atomically: a reader never sees half a file, and two processes writing the same file
    at once (the app's worker and `bench`, say) each write a temporary file of their own."""
    path = Path(path)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
