"""The package's shape: one room per method, no import cycles, the engine below the UI.

Every import in the package (module level and inside functions alike) is read
with `ast`, so a lazy import that closes a cycle counts as much as a top-level one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
METHOD_ROOMS = ("specviz.autoregressive", "specviz.sequoia", "specviz.lookahead", "specviz.prompt_lookup")
ENGINE = ("specviz.engine", "specviz.trace", "specviz.errors", "specviz.paths")
PURE = ("specviz.sequoia.tree_dp", "specviz.sequoia.tree", "specviz.sequoia.verify",
        "specviz.lookahead.pool", "specviz.lookahead.window", "specviz.lookahead.verify",
        "specviz.prompt_lookup.match")
MODEL_CODE = ("transformers", "specviz.engine", "specviz.draft", "accelerate", "gguf")
UI_LIBRARIES = ("gradio", "plotly", "networkx")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports (specviz modules resolved, others by their top-level name)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:   # `from . import figures` imports the submodule
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    return {m for m in found if m and m != "__future__"}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for name, path in mods.items():
        g.add_node(name)
        for target in imports_of(name, path, set(mods)):
            g.add_edge(name, target)
    return g


def _inside(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def imports_from(g: nx.DiGraph, sources, targets) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in g.edges if _inside(a, sources) and _inside(b, targets))


def test_the_package_has_no_import_cycles(graph):
    package_only = graph.subgraph(n for n in graph if n.startswith("specviz"))
    cycles = list(nx.simple_cycles(package_only))
    assert cycles == [], cycles


RUNTIME = ("specviz.runtime",)   # the race, the worker, auto's notes: over the engine, below the UI


def test_the_engine_never_imports_the_ui(graph):
    assert imports_from(graph, ENGINE + RUNTIME, ("specviz.ui",) + UI_LIBRARIES) == []


def test_the_engine_never_imports_the_runtime(graph):
    assert imports_from(graph, ENGINE, RUNTIME) == []
    assert imports_from(graph, RUNTIME, ("specviz.engine",))   # it runs the engine: the check is not vacuous


# What a method's room says and draws of its runs (`Method.views`, `Method.whatif`): the room's part of the UI.
PAGE_PARTS = tuple(f"{room}.{part}" for room in METHOD_ROOMS for part in ("views", "whatif"))


def test_only_the_ui_imports_the_ui(graph):
    # specviz.serve is the app's entry point (app.py and `specviz app` both serve through it), not the engine.
    from_outside = [(a, b) for a, b in graph.edges
                    if a.startswith("specviz") and not _inside(a, ("specviz.ui", "specviz.serve") + PAGE_PARTS)
                    and _inside(b, ("specviz.ui",) + PAGE_PARTS)]
    assert from_outside == []
    # The rooms' page parts do use the UI (the check above is not vacuous), and are reached by path from the
    # records only, never imported by a decoder, a sizing or anything else of the engine's.
    assert imports_from(graph, PAGE_PARTS, ("specviz.ui",))


def test_the_engine_reaches_methods_only_through_the_registry(graph):
    assert imports_from(graph, ENGINE, METHOD_ROOMS) == []


def test_pure_algorithms_import_no_model_code(graph):
    assert imports_from(graph, PURE, MODEL_CODE) == []


def test_a_method_room_reaches_another_only_through_its_pure_algorithms(graph):
    # Shared arithmetic is written once (prompt lookup's matcher feeds Sequoia's and Lookahead's copies; it
    # verifies its chain with Lookahead's verdicts); a decoder, a sizing or a record is its room's alone.
    for room in METHOD_ROOMS:
        others = [r for r in METHOD_ROOMS if r != room]
        crossing = [(a, b) for a, b in imports_from(graph, (room,), others) if b not in PURE]
        assert crossing == [], room


def test_each_method_room_holds_its_decoder_sizing_and_commands():
    for room in ("sequoia", "lookahead"):
        files = {p.name for p in (PACKAGE / room).glob("*.py")}
        assert {"decoder.py", "sizing.py", "cli.py", "verify.py", "method.py", "options.py"} <= files, (room, files)
    assert (PACKAGE / "autoregressive" / "decoder.py").exists() and (PACKAGE / "autoregressive" / "method.py").exists()


def test_every_method_is_one_record_in_its_own_room_and_every_list_reads_the_records():
    from specviz import hosting, methods, request, trace
    from specviz.runtime import auto_notes
    from specviz.engine.methods import decoder_class, sizing
    from specviz.methodspec import all_methods

    records = methods.registered()
    # One record per room, each kept in its room's method.py and naming the room's own decoder and sizing.
    assert [f"specviz.{room.rsplit('.', 1)[1]}.method" for room in METHOD_ROOMS] == list(methods.REGISTERED)
    for room, record in zip(METHOD_ROOMS, records.values()):
        assert record.decoder.startswith(room + ".") and (record.sizing is None or record.sizing.startswith(room + "."))
        assert decoder_class(record.id).__module__ == record.decoder.partition(":")[0]
        assert (sizing(record.id, "first_sizes") is None) == (record.sizing is None)
        assert record.args is None or record.args.startswith(room + ".")
    ids = tuple(records)
    assert all_methods()[:len(ids)] == trace.RACE_METHODS == ids
    assert tuple(request.METHOD_NAMES) == ids and list(request.METHOD_NAMES.values()) == [r.label for r in records.values()]
    assert tuple(hosting.STEP_FORWARDS) == tuple(hosting.GRAPH_SHAPES) == ids
    assert auto_notes.SIZED == tuple(m for m in ids if records[m].sizing)
    # The UI's labels, colours and columns too (imported in a child: gradio stays out of this process).
    code = ("from specviz.ui import figures, views; from specviz import methods; "
            "assert figures.METHOD_LABELS == methods.labels() and figures.METHOD_COLORS == methods.colours(); "
            "assert views.COLUMNS == methods.method_ids(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stdout + out.stderr


def test_importing_the_engine_and_cli_loads_no_ui_library():
    code = ("import sys, specviz.cli, specviz.runtime.race, specviz.engine.methods, specviz.sequoia.decoder, "
            "specviz.lookahead.decoder; print(sorted(m for m in ('gradio', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr



def test_no_function_runs_over_120_lines():
    # Functions a reader can hold in their head: the app's one 394-line builder was split for this.
    import ast

    root = PACKAGE.parent
    long = [(str(p.relative_to(root)), node.name, node.end_lineno - node.lineno + 1)
            for p in sorted(PACKAGE.rglob("*.py")) + [root / "app.py"]
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 120]
    assert long == []
