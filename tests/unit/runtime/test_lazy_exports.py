"""Lazy package exports (hearthnet/runtime/lazy_exports.py): every name resolves, and the CLI's import
does not pull in links, the event log or structlog (it started in 0.36-0.50 s, now ~0.15 s)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "package",
    [
        "hearthnet.transport",
        "hearthnet.community",
        "hearthnet.services.rag.archives",
        "hearthnet.services.rerank",
    ],
)
def test_every_exported_name_resolves_and_an_unknown_one_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert value is getattr(module, name)  # kept after the first use
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_the_cli_imports_without_links_the_event_log_or_structlog() -> None:
    heavy = ["hearthnet.transport.link", "hearthnet.events.log", "hearthnet.community.invite", "structlog"]
    cli = "hearthnet.frontends.cli, hearthnet.frontends.cli.ingest, hearthnet.client"
    code = f"import sys, {cli}\nprint([m for m in {heavy!r} if m in sys.modules])\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
