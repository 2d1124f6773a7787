"""The house map (``docs/house.rst``) is the truth: every room is on it, imports run down its
layers only, and no module of ``nmref`` or ``nmsim`` imports itself through others.

The import graph is read from the source (``ast``), not from ``sys.modules``: an import inside a
function, under ``TYPE_CHECKING`` or through ``importlib.import_module("literal")`` is an edge
too, because each is a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nmref", "nmsim")
HOUSE = ROOT / "docs" / "house.rst"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of both packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest module of ours that ``name`` (a module or ``module.attribute``) is in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.AST) -> list[str]:
    """The modules of ours an import statement (or ``import_module`` call) depends on."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            here = module.split(".")
            if MODULES[module].name != "__init__.py":
                here.pop()
            base = here[: len(here) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        # ``from package import submodule`` depends on the submodule itself
        names = [f"{source}.{alias.name}" for alias in node.names] or [source]
        names = [name if name in MODULES else source for name in names]
    else:  # importlib.import_module("literal")
        names = [node.args[0].value]  # type: ignore[attr-defined]
    return [known for known in map(_known, names) if known is not None and known != module]


def _is_import_module_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        == "import_module"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def _top_level_imports(tree: ast.Module) -> set[int]:
    """Line numbers of the imports that run when the module is imported."""
    lines: set[int] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            lines.add(node.lineno)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return lines


def _graph() -> tuple[nx.DiGraph, dict[str, list[tuple[str, int, bool]]]]:
    """The import graph, and every module's imports of anything as (name, line, top level)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    imports: dict[str, list[tuple[str, int, bool]]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        top = _top_level_imports(tree)
        imports[module] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) or _is_import_module_call(node):
                for target in _targets(module, node):
                    graph.add_edge(module, target, line=node.lineno)
                if isinstance(node, ast.Import):
                    raw = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    raw = [node.module or ""]
                else:
                    raw = []
                imports[module] += [(name, node.lineno, node.lineno in top) for name in raw]
    return graph, imports


GRAPH, IMPORTS = _graph()


def _house() -> str:
    return HOUSE.read_text(encoding="utf-8")


def _layers() -> dict[str, int]:
    """Room (a dotted module prefix) -> its layer, from the house map's layer block."""
    text = _house()
    block = text[text.index("Which way the imports run") :]
    block = block[block.index(".. code-block:: text") : block.index("Where new work goes")]
    layers = {}
    for number, rooms in re.findall(r"^\s+(\d+)\s+(.+)$", block, flags=re.MULTILINE):
        for room in rooms.split():
            layers[room] = int(number)
    return layers


LAYERS = _layers()


def _layer(module: str) -> tuple[str, int]:
    """The room a module is in (the longest prefix named in the layers) and its layer."""
    candidates = [room for room in LAYERS if module == room or module.startswith(room + ".")]
    room = max(candidates, key=len)
    return room, LAYERS[room]


def _cycle_text(graph: nx.DiGraph, component: set[str]) -> str:
    cycle = nx.find_cycle(graph.subgraph(component))
    return (
        " -> ".join(f"{a} (line {graph.edges[a, b]['line']})" for a, b in cycle)
        + f" -> {cycle[0][0]}"
    )


def test_the_graph_was_read():
    # a parser that found nothing would pass every test below
    assert len(MODULES) > 100
    assert GRAPH.has_edge("nmref.cli", "nmref.cli.mask")
    assert GRAPH.has_edge("nmsim.cli.report", "nmref.io.progress")
    assert len(LAYERS) >= 10


def test_no_import_circles():
    circles = [c for c in nx.strongly_connected_components(GRAPH) if len(c) > 1]
    assert not circles, "import circles:\n" + "\n".join(_cycle_text(GRAPH, c) for c in circles)


def test_the_cycle_check_finds_a_planted_circle():
    graph = GRAPH.copy()
    graph.add_edge("nmref.patterns", "nmref.masks", line=0)  # masks imports patterns already
    circles = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles and {"nmref.patterns", "nmref.masks"} <= circles[0]


def _upward(edges) -> list[str]:
    """The edges ``(a, b, data)`` that import a module of a later layer."""
    wrong = []
    for a, b, data in edges:
        (room_a, layer_a), (room_b, layer_b) = _layer(a), _layer(b)
        if layer_b > layer_a:
            wrong.append(
                f"{a} (line {data['line']}, layer {layer_a} {room_a}) imports {b} "
                f"(layer {layer_b} {room_b})"
            )
    return wrong


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_down_the_layers(package):
    wrong = _upward(e for e in GRAPH.edges(data=True) if e[0].startswith(package))
    assert not wrong, "imports against docs/house.rst's layers:\n" + "\n".join(wrong)


def test_a_planted_upward_import_is_caught():
    planted = [
        ("nmref.masks", "nmref.cli.mask", {"line": 1}),
        ("nmref.io.output", "nmsim.perf.gemm", {"line": 2}),
        ("nmsim.report.files", "nmsim.cli.tables", {"line": 3}),
    ]
    assert len(_upward(planted)) == 3
    assert _upward([("nmsim.cli.tables", "nmsim.report.text", {"line": 4})]) == []


def test_nmref_never_imports_nmsim_and_torch_only_lazily_in_io():
    wrong = []
    for module, imports in IMPORTS.items():
        if not module.startswith("nmref"):
            continue
        for name, line, top_level in imports:
            root = name.split(".")[0]
            if root == "nmsim":
                wrong.append(f"{module} line {line} imports {name}")
            elif root == "torch" and (top_level or not module.startswith("nmref.io.")):
                wrong.append(f"{module} line {line} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_every_room_on_disk_is_on_the_map():
    named = set(re.findall(r"``((?:nmref|nmsim)/[\w./]*)``", _house()))
    on_disk = set()
    for package in PACKAGES:
        for entry in (ROOT / package).iterdir():
            if entry.name in {"__pycache__", "py.typed"}:
                continue
            on_disk.add(f"{package}/{entry.name}" + ("/" if entry.is_dir() else ""))
    # a room may be named by itself or by a file inside it
    missing = sorted(
        room for room in on_disk if not any(n == room or n.startswith(room) for n in named)
    )
    assert not missing, f"rooms missing from docs/house.rst: {missing}"
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert not gone, f"docs/house.rst names rooms that do not exist: {gone}"


def test_every_layer_room_exists():
    assert all(room in MODULES for room in LAYERS), sorted(set(LAYERS) - set(MODULES))
