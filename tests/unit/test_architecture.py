"""The shape ARCHITECTURE.md promises, checked on the source tree: the layer order (a lower layer
never imports a higher one), no import circles, services never import each other, the bus, the
transport and the wire know no capability, front doors and the composer reach services only
through the bus (contracts and the client), and only the composition root builds the node.

Every import counts, lazy ones inside functions and those made for the type checker alone: each
is a dependency someone reading the module has to follow.  The checks are tested themselves on
small synthetic trees, so that a rule that stopped finding anything would fail here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import hearthnet

PKG = Path(hearthnet.__file__).resolve().parent

LAYERS = [
    "runtime",
    "identity",
    "blobs",
    "wire",
    "transport",
    "events",
    "community",
    "bus",
    "contracts",
    "config",
    "services",
    "node",
    "answer",
    "frontends",
]
"""Low to high (ARCHITECTURE.md, "Layers"): a module never imports one of a higher layer.  ``node``
is the composition root, ``hearthnet/node.py``: it composes the services, and what sits above it
(the composer, the front doors) is given to it as factories by ``hearthnet node run``.  Beside
them: ``errors`` (the one error tree) below everything; ``client`` (the public face of
``frontends.client``, for programs: the package itself imports ``frontends.client``),
``testing`` and ``demo`` above everything."""
NODE_RUN = "hearthnet.frontends.cli.home"
"""``hearthnet node run``: it puts the node, the composer's factory and the front doors together."""
TOP = {
    "errors": -1,
    "client": len(LAYERS),
    "testing": len(LAYERS),
    "testing_lan": len(LAYERS),
    "demo": len(LAYERS) + 1,
}
CAPABILITY_FAMILIES = ("embed", "rag", "llm", "file", "ocr", "answer", "rerank", "events", "member")
CAPABILITY_BLIND = ("bus", "wire", "transport")


# -- the import graph ---------------------------------------------------------------------------
def module_name(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from pkg import sub`` names ``pkg.sub``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m in known}


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> the modules of the package it imports."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    known = set(paths)
    return {name: imports_of(path, known) - {name} for name, path in paths.items()}


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(module: str) -> int | None:
    """The rank of ``module``'s layer (``None``: the package itself)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    head = parts[1]
    if head in LAYERS:
        return LAYERS.index(head)
    return TOP.get(head)


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` where a module imports one of a higher layer."""
    bad = []
    for module, imported in sorted(graph.items()):
        low = layer_of(module)
        if low is None:
            continue
        for target in sorted(imported):
            high = layer_of(target)
            if high is not None and high > low:
                bad.append((module, target))
    return bad


GRAPH = import_graph()


# -- the rules ----------------------------------------------------------------------------------
def test_every_module_belongs_to_a_layer() -> None:
    unplaced = [m for m in GRAPH if m != "hearthnet" and layer_of(m) is None]
    assert not unplaced, f"modules outside every layer of ARCHITECTURE.md: {unplaced}"


def test_there_is_no_import_circle() -> None:
    assert circles(GRAPH) == []


def test_lower_layers_never_import_higher_ones() -> None:
    assert upward_imports(GRAPH) == []


def test_the_node_is_given_the_composer_and_the_front_doors() -> None:
    """node.py composes the services; it imports neither the composer nor a front door (both are
    above it), and only ``hearthnet node run`` puts the three together."""
    above = ("hearthnet.answer", "hearthnet.frontends")
    assert not [m for m in GRAPH["hearthnet.node"] if m.startswith(above)]
    builders = sorted(
        m
        for m, imported in GRAPH.items()
        if "hearthnet.node" in imported and "hearthnet.answer.hosting" in imported
    )
    assert builders == [NODE_RUN], builders


def test_services_never_import_each_other() -> None:
    for module, imported in GRAPH.items():
        parts = module.split(".")
        if parts[:2] != ["hearthnet", "services"] or len(parts) < 3:
            continue
        others = [
            m
            for m in imported
            if m.startswith("hearthnet.services.") and m.split(".")[2] not in (parts[2], "base")
        ]
        assert not others, f"{module} imports {others}: services reach each other through the bus"


@pytest.mark.parametrize(("wing", "why"), [("frontends", "front doors"), ("answer", "the composer")])
def test_front_doors_and_the_composer_reach_services_only_through_the_bus(wing: str, why: str) -> None:
    for module, imported in GRAPH.items():
        if module.split(".")[1:2] != [wing] and not (wing == "frontends" and module == "hearthnet.client"):
            continue
        bad = sorted(
            m for m in imported if m.startswith("hearthnet.services") and m != "hearthnet.services.base"
        )
        composer = sorted(m for m in imported if wing == "frontends" and m.startswith("hearthnet.answer"))
        if module == NODE_RUN:
            composer.remove("hearthnet.answer.hosting")  # gives the node the composer's factory
        bad += composer
        assert not bad, f"{module} imports {bad}: {why} call capabilities (contracts, the client, the bus)"


def docstring_ids(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def capability_strings(path: Path, families: Iterable[str] = CAPABILITY_FAMILIES) -> list[str]:
    """String constants of ``path``'s code (docstrings left out) that name a capability of a family."""
    tree = ast.parse(path.read_text())
    docstrings = docstring_ids(tree)
    prefixes = tuple(f"{family}." for family in families)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value.startswith(prefixes)
    ]


@pytest.mark.parametrize("layer", CAPABILITY_BLIND)
def test_the_bus_transport_and_wire_know_no_capability(layer: str) -> None:
    for path in (PKG / layer).rglob("*.py"):
        named = capability_strings(path)
        assert not named, f"{layer}/{path.name} names capabilities {named}: they belong to contracts/"
        bad = [
            m for m in GRAPH[module_name(path)] if m.startswith(("hearthnet.contracts", "hearthnet.services"))
        ]
        assert not bad, f"{layer}/{path.name} imports {bad}"


DOOR_NAMES = (
    "embed",
    "rag",
    "llm",
    "file",
    "ocr",
    "answer",
    "rerank",
    "events",
    "member",
    "node",
    "community",
)
_NAMED = "(?:" + "|".join(DOOR_NAMES) + r")\.[a-z_]+(?:\.[a-z_]+)*(?:@\d+\.\d+)?"


def capability_names(path: Path) -> list[str]:
    """String constants of ``path``'s code that are a capability's (or an event's) name, whole:
    ``rag.query``, ``llm.chat@1.0`` (a message that names one in a sentence is not counted)."""
    import re

    return [
        value
        for value in capability_strings(path, DOOR_NAMES)
        if re.fullmatch(_NAMED, value) and not value.endswith((".lock", ".sqlite3", ".toml", ".json"))
    ]


def test_front_doors_name_no_capability_outside_the_contracts() -> None:
    """A door calls a capability through its family's typed client (``RagClient``, ``AnswerClient``,
    ...) and compares names with the contracts' constants: no door spells a capability's name."""
    for path in (PKG / "frontends").rglob("*.py"):
        named = capability_names(path)
        assert not named, f"frontends/{path.relative_to(PKG / 'frontends')} names {named}: use contracts/"


CORPUS_NAME_RULE = "[a-z0-9-]"
"""The corpus-name pattern's character class: it is written once, in ``contracts/rag.py``."""


def pattern_homes(root: Path = PKG) -> list[str]:
    """Modules whose code (docstrings and comments left out) spells the corpus-name pattern."""
    homes = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = docstring_ids(tree) | {  # and the strings that document an attribute
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        }
        if any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and id(n) not in docs
            and CORPUS_NAME_RULE in n.value
            for n in ast.walk(tree)
        ):
            homes.append(module_name(path, root))
    return homes


def test_the_corpus_name_pattern_has_one_home() -> None:
    assert pattern_homes() == ["hearthnet.contracts.rag"]


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
LONG_MODULES: Mapping[str, str] = {}
"""Modules over ``MAX_MODULE_LINES`` today, each with why it is not split yet."""
LONG_FUNCTIONS: Mapping[str, str] = {}
"""Functions over ``MAX_FUNCTION_LINES`` today, each with why it is not cut yet."""


def long_code(root: Path = PKG) -> tuple[dict[str, int], dict[str, int]]:
    """Modules over ``MAX_MODULE_LINES`` and functions over ``MAX_FUNCTION_LINES`` (from ``def``
    to their last line), with their lengths; a method is named ``module.Class.method``."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        name = module_name(path, root)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            modules[name] = len(source.splitlines())

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}.{child.name}")
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (child.end_lineno or child.lineno) - child.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        functions[f"{prefix}.{child.name}"] = length
                    visit(child, f"{prefix}.{child.name}")

        visit(ast.parse(source), name)
    return modules, functions


def test_modules_and_functions_stay_small() -> None:
    modules, functions = long_code()
    assert set(modules) <= set(LONG_MODULES), f"over {MAX_MODULE_LINES} lines: {modules}"
    assert set(functions) <= set(LONG_FUNCTIONS), f"over {MAX_FUNCTION_LINES} lines: {functions}"
    # an exception that is no longer one leaves the list (so the list only shrinks)
    assert set(LONG_MODULES) <= set(modules), set(LONG_MODULES) - set(modules)
    assert set(LONG_FUNCTIONS) <= set(functions), set(LONG_FUNCTIONS) - set(functions)


# -- the rules find what they are for -------------------------------------------------------------
def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """A synthetic ``hearthnet`` package under ``root`` with ``files`` (path -> source)."""
    pkg = root / "hearthnet"
    for rel, source in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == root:
                break
            (parent / "__init__.py").touch()
        path.write_text(source)
    return pkg


def test_a_circle_added_back_is_found(tmp_path: Path) -> None:
    pkg = write_tree(
        tmp_path,
        {
            "bus/context.py": "from hearthnet.bus.descriptors import Version\n",
            "bus/descriptors.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from hearthnet.bus.context import CallContext\n",
            "bus/router.py": "def choose():\n    from hearthnet.bus import context\n",
            "wire/frames.py": "import hearthnet.errors\n",
            "errors.py": "",
        },
    )
    graph = import_graph(pkg)
    assert circles(graph) == [["hearthnet.bus.context", "hearthnet.bus.descriptors"]]
    assert graph["hearthnet.bus.router"] == {"hearthnet.bus.context"}  # a lazy import counts too
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    pkg = write_tree(
        tmp_path,
        {
            "events/rules.py": "from hearthnet.community.membership import Membership\n",
            "community/membership.py": "from hearthnet.events.rules import EventRules\n",
            "services/rag/service.py": "from hearthnet.contracts.rag import MAX_K\n",
            "contracts/rag.py": "",
            "node.py": "def doors():\n    from hearthnet.frontends.doors import control_door\n",
            "frontends/doors.py": "from hearthnet.node import NodeParts\n",
        },
    )
    assert upward_imports(import_graph(pkg)) == [
        ("hearthnet.events.rules", "hearthnet.community.membership"),
        ("hearthnet.node", "hearthnet.frontends.doors"),
    ]


def test_a_capability_named_below_the_contracts_is_found(tmp_path: Path) -> None:
    pkg = write_tree(
        tmp_path,
        {"bus/predicates.py": '"""Predicates of rag.ingest."""\n_P = {"rag.ingest": None}\nX = "node_id"\n'},
    )
    assert capability_strings(pkg / "bus" / "predicates.py") == ["rag.ingest"]


def test_a_door_naming_a_capability_and_a_second_corpus_pattern_are_found(tmp_path: Path) -> None:
    pkg = write_tree(
        tmp_path,
        {
            "frontends/cli/q.py": '''"""Asks rag.query."""\nX = call("rag.query")\nY = "llm.chat@1.0"\n'''
            """Z = "rag.query answered nothing"\nW = "node.lock"\n""",
            "contracts/rag.py": 'CORPUS_PATTERN = "[a-z0-9-]{1,64}"\n',
            "services/rag/keyword.py": '"""[a-z0-9-]"""\nOK = re.compile(r"[a-z0-9-]+")\n"""[a-z0-9-]"""\n',
        },
    )
    assert sorted(capability_names(pkg / "frontends" / "cli" / "q.py")) == ["llm.chat@1.0", "rag.query"]
    assert pattern_homes(pkg) == ["hearthnet.contracts.rag", "hearthnet.services.rag.keyword"]


def test_long_modules_and_functions_are_found(tmp_path: Path) -> None:
    lines = [f"x{i} = {i}" for i in range(MAX_FUNCTION_LINES)]
    pkg = write_tree(
        tmp_path,
        {
            "big.py": "\n" * MAX_MODULE_LINES + "X = 1\n",
            "bus/calls.py": "class C:\n    def m(self):\n" + "".join(f"        {x}\n" for x in lines),
            "bus/short.py": "def f():\n" + "".join(f"    {x}\n" for x in lines[:-1]),
        },
    )
    modules, functions = long_code(pkg)
    assert modules == {"hearthnet.big": MAX_MODULE_LINES + 1}
    assert functions == {"hearthnet.bus.calls.C.m": MAX_FUNCTION_LINES + 1}
