"""An embedder frozen with SIGSTOP under an ingest: the call moves on, the next one does not wait.

A and B: embed.text only.   C: rag only, embeds through the bus (10 s per embed call).

A stopped process keeps its TCP connections up (the kernel still acknowledges) until the
liveness check gives the link up (30 s here), so to its callers it looks alive and silent.
Before the bus hedged, the embed call sent to it took its whole 10 s deadline and the
ingest failed with ``timeout`` while the other embedder was idle.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from hearthnet.client import Client
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

from .conftest import log_records, report

S = "frozen-embedder"
FIRST = PDF_DIR / "multicolumn_2col_latex.pdf"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("frozen"))
    try:
        a = m.add("a", env={"HEARTHNET_RAG": "0"})
        b = m.add("b", env={"HEARTHNET_RAG": "0"})
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "trusted")
        m.wait_full_mesh(timeout=120)
        wait_for(lambda: len(embedders(c)) == 2, timeout=90, what="c to see both embedders")
        yield m
    finally:
        m.close()


def embedders(node: MeshNode) -> set[str]:
    return {x["node"] for x in node.status()["capabilities"] if x["capability"] == "embed.text@1.0"}


def test_an_ingest_moves_on_from_a_frozen_embedder_and_the_next_call_does_not_wait(mesh: LocalMesh) -> None:
    a, b, c = mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]
    # C has made no embed call yet: its router ranks both alike and asks the smaller id first.
    frozen, healthy = sorted((a, b), key=lambda n: n.node_id)
    assert frozen.process is not None
    os.kill(frozen.process.pid, signal.SIGSTOP)
    try:
        report(S, f"froze {frozen.name} (SIGSTOP); {healthy.name} is up")
        started = time.monotonic()
        proc = c.cli("ingest", str(FIRST), "--corpus", "frozen", "--json", check=False, timeout=300)
        took = time.monotonic() - started
        report(S, f"ingest through the frozen embedder: exit {proc.returncode} in {took:.1f} s")
        assert proc.returncode == 0, proc.stderr
        (entry,) = json.loads(proc.stdout)["results"]
        # before hedging, the call to the frozen one took its whole deadline and the ingest failed
        assert entry["ok"] and entry["chunks_indexed"] > 0

        # The frozen embedder really was asked first, was overtaken, and is quarantined.
        hedged = [r for r in log_records(c, "call_hedged") if r.get("overdue") == frozen.node_id]
        quarantined = [
            r for r in log_records(c, "provider_quarantined") if r.get("provider") == frozen.node_id
        ]
        assert hedged and quarantined, (hedged, quarantined)

        # The next call goes straight to the healthy embedder: no wait on the frozen one.
        started = time.monotonic()
        out = Client(c.home).call("embed.text", input={"texts": ["a warm hearth in winter"]}, timeout=10)
        took = time.monotonic() - started
        report(S, f"next embed call from C: {took * 1000:.0f} ms, served by {out.provider[:16]}…")
        # straight to the healthy one: a wait on the frozen one would have ended in a second hedge
        assert out.provider == healthy.node_id
        assert len([r for r in log_records(c, "call_hedged") if r.get("overdue") == frozen.node_id]) == len(
            hedged
        )
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
