"""The package's rooms, read from its source (no import runs): the engine imports no draft module,
and no specviz module imports, at any depth, one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import specviz

ROOT = Path(specviz.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["specviz", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The specviz modules `path` imports anywhere in it (a function's deferred import included)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:   # `from . import x` imports the module x, else a name of `base`
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: _imports(path, set(paths)) for name, path in paths.items()}


def test_the_engine_imports_no_draft_module():
    upward = {(m, d) for m, deps in _graph().items() if m.startswith("specviz.engine")
              for d in deps if d.startswith("specviz.draft")}
    assert not upward, sorted(upward)


def test_no_import_cycles():
    graph = _graph()
    cycles, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles
