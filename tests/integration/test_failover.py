"""A provider killed mid-call: the caller hears within its deadline and idempotent calls move on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hearthnet.client import Client
from hearthnet.errors import BusError
from hearthnet.testing import LocalMesh, MeshNode, wait_for

# Long inputs so one embed.text call takes seconds on this 2-core machine.
TEXTS = [
    f"Paragraph {i}: " + "the hearth keeps the household warm through the long winter. " * 14
    for i in range(96)
]


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("failover"))
    m.env["HEARTHNET_RAG"] = "0"
    try:
        a, b = m.add("a"), m.add("b")
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=60)
        wait_for(lambda: len(embed_providers(c)) == 2, timeout=60, what="c to see both embedders")
        yield m
    finally:
        m.close()


def embed_providers(node: MeshNode) -> set[str]:
    return {c["node"] for c in node.status()["capabilities"] if c["capability"] == "embed.text@1.0"}


def in_flight(node: MeshNode) -> int:
    stats = node.cli_json("call", "node.stats", timeout=10)["output"]["capabilities"]
    return int(stats.get("embed.text@1.0", {}).get("in_flight", 0))


def call_in_thread(home: Any, **kw: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["result"] = Client(home).call("embed.text", input={"texts": TEXTS}, **kw)
        except BusError as exc:
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_idempotent_call_survives_its_provider_being_killed(mesh: LocalMesh) -> None:
    a, b, c = mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]
    thread, box = call_in_thread(c.home, timeout=120)
    serving = wait_for(
        lambda: next((n for n in (a, b) if in_flight(n) > 0), None), timeout=30, what="a provider to start"
    )
    serving.kill()
    thread.join(timeout=150)
    assert not thread.is_alive()
    assert "error" not in box, box.get("error")
    survivor = b if serving is a else a
    assert box["result"].provider == survivor.node_id
    assert len(box["result"].output["embeddings"]) == len(TEXTS)

    # A call pinned to a provider that dies fails with partition well inside its deadline.
    thread, box = call_in_thread(c.home, timeout=120, provider=survivor.node_id)
    wait_for(lambda: in_flight(survivor) > 0, timeout=30, what="the survivor to start")
    survivor.kill()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert box["error"].code in ("partition", "timeout")
    assert box["seconds"] < 120


def test_cli_embed_call_from_a_node_without_an_embedder_returns_plain_lists(mesh: LocalMesh) -> None:
    """Runs after the kill test, which stopped both embedders: it restarts one."""
    a, c = mesh.nodes["a"], mesh.nodes["c"]
    if a.process is None or a.process.poll() is not None:
        a.start()
        a.wait_ready()
    wait_for(lambda: a.node_id in embed_providers(c), timeout=60, what="c to see a's embedder again")
    out = c.cli_json("call", "embed.text", "--input", '{"texts": ["a warm hearth", "a cold winter"]}')
    assert out["provider"] == a.node_id
    vectors = out["output"]["embeddings"]
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-3
    assert out["meta"]["model"] == "all-MiniLM-L6-v2" and out["meta"]["truncated"] == 0
    proc = c.cli("call", "embed.text", "--input", '{"texts": []}', check=False)
    assert proc.returncode != 0 and proc.stderr.startswith("hearthnet: bad_request:")
    proc = c.cli(
        "call",
        "embed.text",
        "--params",
        '{"model": "no-such-model"}',
        "--input",
        '{"texts": ["x"]}',
        check=False,
    )
    assert proc.returncode != 0 and proc.stderr.startswith("hearthnet: not_found:")
