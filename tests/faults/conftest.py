"""Shared helpers of the fault scenarios (real node processes on 127.0.0.1, see hearthnet/testing.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from hearthnet.testing import MeshNode

NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}


@pytest.fixture(autouse=True)
def _quiet_structlog() -> Iterator[None]:
    """This process's own bus logs every failed call at info; under ``-s`` keep only the narrative."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        yield
    finally:
        structlog.configure(**old)


def report(scenario: str, what: str) -> None:
    """One line of the scenario's narrative (shown under ``pytest -s``)."""
    print(f"[fault:{scenario}] {what}", flush=True)


def event_ids(node: MeshNode) -> list[str]:
    return [e["event_id"] for e in node.cli_json("events", timeout=30)["events"]]


def node_stats(node: MeshNode) -> dict[str, Any]:
    out: dict[str, Any] = node.cli_json("call", "node.stats", timeout=30)["output"]
    return out


def port_of(node: MeshNode) -> int:
    address: str = node.status()["addresses"][0]
    return int(address.rpartition(":")[2])


def log_records(node: MeshNode, event: str) -> list[dict[str, Any]]:
    """The node's structlog JSON lines whose ``event`` is ``event``."""
    if node.log_path is None or not node.log_path.exists():
        return []
    out = []
    for line in node.log_path.read_text(errors="replace").splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            out.append(record)
    return out
