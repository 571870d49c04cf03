"""Every link and every command in the README and docs/ works.

Links: each relative link's target exists, and a `#anchor` names a heading of the page it points to.
Commands are read from the pages themselves (fenced blocks, indented blocks and inline code), so a new
command is checked as soon as it is written down: each `specviz SUB` / `python -m specviz SUB` answers
`--help` and knows every `--flag` the page gives it; each scripts/ or experiments/ file a command runs
exists, a Python one answers `--help` and knows its flags, a shell one parses (`bash -n`). Nothing loads
a model: `--help` exits before any work.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_START = re.compile(r"^(?:\S+=\S+\s+)*(?:(?:\.venv/bin/)?(?:python3?\s+-m\s+specviz|specviz|python3?|bash)"
                           r"|(?:\./)?(?:scripts|experiments)/\S+\.(?:py|sh))\s")
SCRIPT = re.compile(r"^(?:\./)?((?:scripts|experiments)/\S+\.(?:py|sh))$")
SEPARATORS = {"&&", "||", "|", ";"}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------------------------------------- links

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_leads_somewhere(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):   # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {rel(dest)}")
    assert not broken, broken


# ------------------------------------------------------------------------------------------- commands

def code_pieces(text: str) -> list[str]:
    """Shell lines of fenced and indented blocks, and inline code spans, continuation lines joined."""
    pieces = []
    fenced = re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    for lang, body in fenced:
        if lang in ("", "bash", "sh", "shell", "console"):
            pieces += body.replace("\\\n", " ").splitlines()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    pieces += [line for line in prose.replace("\\\n", " ").splitlines() if line.startswith("    ")]
    pieces += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return [piece.strip() for piece in pieces]


def commands_in(text: str) -> list[list[str]]:
    """Each command shown, as its tokens up to the first `&&`, `|` or `;`, comments dropped."""
    found = []
    for piece in code_pieces(text):
        if not COMMAND_START.match(piece + " "):
            continue
        try:
            tokens = shlex.split(piece, comments=True)
        except ValueError:   # an unbalanced quote in prose: read it plainly
            tokens = piece.split()
        cut = next((i for i, t in enumerate(tokens) if t in SEPARATORS), len(tokens))
        found.append(tokens[:cut])
    return found


def invocation(tokens: list[str]) -> tuple[str, str, list[str]] | None:
    """('specviz', SUB, flags) or ('script', PATH, flags) for a command; None for anything else."""
    for i, token in enumerate(tokens):
        is_specviz = token.endswith("specviz") and (i == 0 or tokens[i - 1] == "-m" or "=" in tokens[i - 1])
        if is_specviz:
            rest = tokens[i + 1:]
            return "specviz", rest[0] if rest else "", [t for t in rest[1:] if t.startswith("--")]
        script = SCRIPT.match(token)
        if script:
            return "script", script.group(1), [t for t in tokens[i + 1:] if t.startswith("--")]
    return None


@functools.cache
def shown() -> dict[tuple[str, str], dict[str, set[str]]]:
    """(kind, name) -> {flag -> the pages that use it with that command} over every page."""
    table: dict[tuple[str, str], dict[str, set[str]]] = {}
    for page in PAGES:
        for tokens in commands_in(page.read_text(encoding="utf-8")):
            found = invocation(tokens)
            if found is None:
                continue
            kind, name, flags = found
            entry = table.setdefault((kind, name), {})
            entry.setdefault("", set()).add(rel(page))
            for flag in flags:
                entry.setdefault(flag.split("=")[0], set()).add(rel(page))
    return table


def run_help(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


@functools.cache
def subcommands() -> set[str]:
    out = run_help("-m", "specviz").stdout
    return set(re.search(r"\{([a-z,-]+)\}", out).group(1).split(","))


def specviz_commands() -> list[str]:
    return sorted(name for kind, name in shown() if kind == "specviz")


def script_paths() -> list[str]:
    return sorted(name for kind, name in shown() if kind == "script")


def script_help(script: Path) -> str:
    """The script's --help, and each of its subcommands' where it has some (their flags are theirs)."""
    done = run_help(str(script))
    assert done.returncode == 0 and "usage:" in done.stdout, done.stdout + done.stderr
    choices = re.search(r"^usage:[^{]*\{([\w,-]+)\}", done.stdout, re.M)
    helps = [done.stdout]
    for sub in choices.group(1).split(",") if choices else []:
        helps.append(run_help(str(script), sub).stdout)
    return "\n".join(helps)


def unknown_flags(help_text: str, used: dict[str, set[str]]) -> dict[str, set[str]]:
    return {flag: pages for flag, pages in used.items()
            if flag and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text)}


@pytest.mark.parametrize("sub", specviz_commands())
def test_each_specviz_command_shown_answers_help_and_knows_its_flags(sub):
    pages = shown()[("specviz", sub)]
    assert not sub or sub in subcommands(), f"`specviz {sub}` is shown in {sorted(pages[''])} but is no command"
    done = run_help("-m", "specviz", *([sub] if sub else []))
    assert done.returncode == 0, done.stderr
    assert not unknown_flags(done.stdout, pages), f"flags `specviz {sub} --help` does not list"


@pytest.mark.parametrize("path", script_paths())
def test_each_script_shown_exists_and_answers_help(path):
    used = shown()[("script", path)]
    script = ROOT / path
    assert script.is_file(), f"{path} is shown in {sorted(used[''])} but does not exist"
    if script.suffix == ".sh":
        subprocess.run(["bash", "-n", str(script)], check=True)
        help_text = script.read_text(encoding="utf-8")   # its header comment lists its options
    else:
        help_text = script_help(script)
    assert not unknown_flags(help_text, used), f"flags {path} does not know"


def test_the_pages_show_commands_at_all():
    """The readers above found what the README promises: its two make commands' tools and the CLI."""
    assert {"generate", "bench", "fetch-model", "app"} <= set(specviz_commands())
    assert {"scripts/app_speed.py", "scripts/gpu/gpu_check.sh", "experiments/ab_revisions.py"} <= set(script_paths())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in readme and "make test" in readme and len(readme.splitlines()) <= 300


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    orphans = [rel(page) for page in PAGES[1:] if page.resolve() not in linked]
    assert not orphans, orphans
