"""Prompt files: the project's suites (`assets/suites/*.jsonl`) and users' own JSONL files.

Each line is an object with a non-empty "prompt" (and optionally "id", "suite").
Shared by `bench`, `profile-acceptance` and the scripts.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InvalidInput
from ..paths import assets_dir

SUITES = ("chat", "code", "math", "rewrite")


def read_prompts(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"prompt file '{path}' does not exist")
    prompts = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
            raise InvalidInput(f"{path}:{lineno}: each line must be an object with a non-empty \"prompt\"")
        item.setdefault("id", f"{path.stem}-{lineno}")
        item.setdefault("suite", path.stem)
        prompts.append(item)
    if not prompts:
        raise InvalidInput(f"prompt file '{path}' holds no prompts")
    return prompts


def read_suites(names: str | list[str]) -> list[dict]:
    """The project's prompt suites by name (`chat,code,math,rewrite`), in that order."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not names:
        raise InvalidInput(f"--suite is empty (choose from {', '.join(SUITES)})")
    prompts = []
    for name in names:
        path = assets_dir() / "suites" / f"{name}.jsonl"
        if not path.exists():
            raise InvalidInput(f"unknown suite '{name}' (choose from {', '.join(SUITES)})")
        prompts.extend(read_prompts(path))
    return prompts


def limit_per_suite(prompts: list[dict], n: int) -> list[dict]:
    kept, seen = [], {}
    for item in prompts:
        seen[item["suite"]] = seen.get(item["suite"], 0) + 1
        if seen[item["suite"]] <= n:
            kept.append(item)
    return kept
