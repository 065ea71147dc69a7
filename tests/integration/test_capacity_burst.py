"""Bursts beyond a capability's ``max_concurrent`` on one real node: slower, never failed.

``rag.query`` serves 8 calls at once here (``HEARTHNET_RAG_QUERY_MAX_CONCURRENT``, 256 by default) and
``rag.ingest`` 2; the CLI's client retries
``capacity_exceeded`` with jittered backoff (``hearthnet.client``), so 50 concurrent
``hearthnet query`` processes all get their answers, and a third concurrent ``ingest``
waits its turn instead of failing.

CLI processes start a few a second on two cores, too slowly to fill 8 slots by
themselves; so the node is held (``SIGSTOP``) while they connect, and released once
every one of them waits in its accept queue: the burst then really is concurrent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

PDFS = [
    PDF_DIR / "multicolumn_2col_latex.pdf",
    PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf",
    PDF_DIR / "en_geobase_nhn_data_model.pdf",
]
QUERIES = 50


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshNode]:
    m = LocalMesh(tmp_path_factory.mktemp("burst"))
    try:
        # rag.query admits 256 by default: at 8, 50 processes exceed it by far, as the test needs
        a = m.add("a", env={"HEARTHNET_RAG_QUERY_MAX_CONCURRENT": "8"})
        m.found(a)
        yield a
    finally:
        m.close()


def cli(node: MeshNode, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(node.home), *args, "--json"]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**node.env, **node.extra_env}
    )


def waiting_connections(node: MeshNode) -> int:
    """Connections to the node's control socket (accepted or not: a stopped node accepts none)."""
    path = str(node.home / "control.sock")
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.rstrip().endswith(path)) - 1  # less the listener


@contextmanager
def held(node: MeshNode) -> Iterator[None]:
    """The node stopped for the block: callers queue up on its control socket meanwhile."""
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(node.process.pid, signal.SIGCONT)


def burst(node: MeshNode, commands: list[list[str]]) -> list[subprocess.Popen[str]]:
    """Start every command while the node is held; release it once all of them have connected."""
    with held(node):
        procs = [cli(node, *args) for args in commands]
        wait_for(
            lambda: waiting_connections(node) >= len(commands),
            timeout=120,
            what=f"{len(commands)} CLI processes to connect",
        )
    return procs


def finish(procs: list[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        out.append((p.returncode, stdout, stderr))
    return out


def refusals(node: MeshNode, capability: str) -> int:
    stats = node.cli_json("call", "node.stats")["output"]["capabilities"].get(capability, {})
    return int(stats.get("errors_by_code", {}).get("capacity_exceeded", 0))


def test_a_third_concurrent_ingest_waits_its_turn(node: MeshNode) -> None:
    """``rag.ingest`` runs two at a time: the third is refused, retried, and indexed."""
    started = time.monotonic()
    procs = burst(node, [["ingest", str(pdf), "--corpus", "burst"] for pdf in PDFS])
    results = finish(procs, timeout=600)
    for code, stdout, stderr in results:
        assert code == 0, stderr
        (entry,) = json.loads(stdout)["results"]
        assert entry["ok"] and entry["chunks_indexed"] > 0, entry
    assert refusals(node, "rag.ingest@1.0") >= 1  # the third really was turned away first
    print(f"3 concurrent ingests in {time.monotonic() - started:.1f} s")


def test_fifty_concurrent_query_processes_all_get_their_answers(node: MeshNode) -> None:
    before = refusals(node, "rag.query@1.0")
    started = time.monotonic()
    procs = burst(
        node,
        [
            ["query", f"how is text laid out in columns {i}", "--corpus", "burst", "-k", "3"]
            for i in range(QUERIES)
        ],
    )
    released = time.monotonic()
    results = finish(procs, timeout=120)
    took = time.monotonic() - started
    failed = [(code, stderr.strip()) for code, _, stderr in results if code != 0]
    assert not failed, failed[:5]
    answers: list[dict[str, Any]] = [json.loads(stdout) for _, stdout, _ in results]
    assert all(len(a["chunks"]) == 3 and a["provider"] == node.node_id for a in answers)
    refused = refusals(node, "rag.query@1.0") - before
    assert refused > 0  # all at once past the 8 slots: refused first, retried, answered
    print(
        f"{QUERIES} concurrent queries: {took:.1f} s from the first start, "
        f"{time.monotonic() - released:.1f} s from the release; {refused} refusals retried"
    )
