"""Layering rules the architecture promises, checked on the source tree."""

from __future__ import annotations

import ast
from pathlib import Path

import hearthnet

PKG = Path(hearthnet.__file__).resolve().parent
# lower layers never import higher ones
LAYERS = ["identity", "wire", "transport", "blobs", "events", "community", "bus", "services", "answer"]
SERVICE_NAMES = ["embedding", "rag", "file", "node", "community", "llm", "ocr", "rerank"]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {m for m in found if m.startswith("hearthnet")}


def test_rag_never_imports_the_embedding_service() -> None:
    for path in (PKG / "services" / "rag").rglob("*.py"):
        bad = [m for m in imports_of(path) if m.startswith("hearthnet.services.embedding")]
        assert not bad, f"{path.name} imports {bad}: RAG must reach embed.text only through the bus"


def test_services_never_import_each_other() -> None:
    for name in SERVICE_NAMES:
        for path in (PKG / "services" / name).rglob("*.py"):
            others = [
                m
                for m in imports_of(path)
                if m.startswith("hearthnet.services.") and m.split(".")[2] not in (name, "base")
            ]
            assert not others, f"services/{name}/{path.name} imports {others}"


def test_the_composer_reaches_services_only_through_the_bus() -> None:
    for path in (PKG / "answer").rglob("*.py"):
        bad = [
            m
            for m in imports_of(path)
            if m.startswith("hearthnet.services") and m != "hearthnet.services.base"
        ]
        assert not bad, f"answer/{path.name} imports {bad}: the composer calls services through the bus"


def test_lower_layers_never_import_higher_ones() -> None:
    for i, layer in enumerate(LAYERS):
        higher = [*LAYERS[i + 1 :], "node", "cli", "client", "control"]
        for path in (PKG / layer).rglob("*.py"):
            for module in imports_of(path):
                parts = module.split(".")
                if len(parts) > 1 and parts[1] in higher and parts[1] != layer:
                    # community <-> events share the membership model; both sit below the bus.
                    if {layer, parts[1]} == {"events", "community"}:
                        continue
                    raise AssertionError(f"{layer}/{path.name} imports higher layer {module}")


def test_front_doors_reach_services_only_through_the_bus() -> None:
    for path in (PKG / "frontends").rglob("*.py"):
        bad = [
            m
            for m in imports_of(path)
            if m.startswith(("hearthnet.services", "hearthnet.answer"))
            and m != "hearthnet.services.rag.names"
        ]
        assert not bad, f"frontends/{path.name} imports {bad}: front doors call capabilities through the bus"


def test_nothing_below_the_front_doors_imports_them() -> None:
    for layer in [*LAYERS, "node_services.py"]:
        target = PKG / layer
        paths = [target] if target.suffix == ".py" else list(target.rglob("*.py"))
        for path in paths:
            bad = [m for m in imports_of(path) if m.startswith("hearthnet.frontends")]
            assert not bad, f"{path.relative_to(PKG)} imports the front doors: {bad}"
