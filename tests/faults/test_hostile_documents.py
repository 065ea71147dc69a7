"""Issue 29, items 1 and 5, against a real node process: a small hostile PDF cannot stall ingest
(its answer comes at the caller's deadline, a small text ingested meanwhile is done in seconds,
the node's CPU is back to idle right after and the worker that read it is gone), and floods of
repeated log records (a PDF that makes pypdf warn 11,000 times, a client sending wrong keys)
write a bounded number of records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.hostile_pdfs import TEXT_SHOWN, content_bomb, nested_resources

from .conftest import log_records, report

S = "hostile-documents"
TICK = os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("hostile-docs"))
    m.env["HEARTHNET_OCR"] = "0"
    try:
        a = m.add("a")
        m.found(a, "hearth")
        yield m
    finally:
        m.close()


def _put(node: MeshNode, tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    cid: str = node.cli_json("file", "put", str(path))["doc_cid"]
    return cid


def _ingest_proc(node: MeshNode, corpus: str, cid: str, name: str, timeout: float) -> subprocess.Popen[str]:
    inp = json.dumps({"doc_cid": cid, "title": name, "filename": name})
    cmd = [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(node.home), "call", "rag.ingest"]
    cmd += ["--params", json.dumps({"corpus": corpus}), "--input", inp, "--timeout", str(timeout), "--json"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=node.env)


def _answer(proc: subprocess.Popen[str], limit: float) -> tuple[float, int, dict[str, Any]]:
    started = time.perf_counter()
    out, err = proc.communicate(timeout=limit)
    text = out.strip() or err.strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = {"raw": text}
    return time.perf_counter() - started, proc.returncode, doc


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def _cpu(pid: int) -> dict[int, float]:
    """CPU seconds of the node (with its reaped children) and of each live child."""
    fields = _stat(pid)
    assert fields is not None
    out = {pid: sum(int(x) for x in fields[11:15]) / TICK}  # utime stime cutime cstime
    for child in _children(pid):
        f = _stat(child)
        if f is not None and f[0] != "Z":
            out[child] = (int(f[11]) + int(f[12])) / TICK
    return out


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(max(0.0, v - before.get(p, 0.0)) for p, v in after.items())


def test_floods_of_repeated_records_are_summarised(mesh: LocalMesh, tmp_path: Path) -> None:
    a = mesh.nodes["a"]
    before = len(log_records(a, "pypdf_warning"))
    cid = _put(a, tmp_path, "nested.pdf", nested_resources())
    _took, code, out = _answer(_ingest_proc(a, "nested", cid, "nested.pdf", 120), 200)
    assert code == 0, out
    wait_for(
        lambda: (
            log_records(a, "pypdf_warning_repeated") or len(log_records(a, "pypdf_warning")) - before > 20
        ),
        timeout=30,
        what="the document's warnings logged",
    )
    written = len(log_records(a, "pypdf_warning")) - before
    assert written <= 20
    summary = log_records(a, "pypdf_warning_repeated")[-1]
    report(S, f"nested /Resources: {written} pypdf_warning records, then {summary['count']} counted")
    assert written <= 20 and summary["count"] > 1000

    url = json.loads((a.home / "ui.json").read_text())["url"]
    refused = len(log_records(a, "api_key_refused"))
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(300):
            r = client.get("/v1/models", headers={"Authorization": "Bearer not-a-key"})
            assert r.status_code == 401
    wait_for(lambda: len(log_records(a, "api_key_refused")) > refused, timeout=30, what="the refusals logged")
    written = len(log_records(a, "api_key_refused")) - refused
    report(S, f"300 wrong-key requests: {written} api_key_refused records")
    assert written <= 5


def test_a_small_pdf_cannot_stall_ingest(mesh: LocalMesh, tmp_path: Path) -> None:
    a = mesh.nodes["a"]
    assert a.process is not None
    node_pid = a.process.pid
    text = _put(a, tmp_path, "basil.md", b"# Basil\n\nBasil likes sun and warm soil.\n")
    alone_text = _put(a, tmp_path, "sage.md", b"# Sage\n\nSage likes dry soil.\n")
    bomb = _put(a, tmp_path, "bomb.pdf", content_bomb())
    # within every per-page limit (0.9 M operators a page), but 60 pages of them: a minute of CPU
    slow = _put(
        a, tmp_path, "slow.pdf", content_bomb(pages=60, inflated=1_800_000, head=TEXT_SHOWN, unit=b"q Q\n")
    )

    # a small text alone: how long an ingest takes on this machine now (the embedder warmed up)
    alone, code, out = _answer(_ingest_proc(a, "garden", alone_text, "sage.md", 120), 200)
    assert code == 0, out
    report(S, f"a small text alone: {alone:.2f}s")

    # the bomb: 60 pages share one 20 MiB content stream (50 KB of PDF)
    deadline = 30.0
    took, code, out = _answer(_ingest_proc(a, "books", bomb, "bomb.pdf", deadline), deadline + 60)
    report(S, f"the 20 MiB bomb answered in {took:.2f}s: {out}")
    assert code != 0 and took < deadline + 5
    assert "limit on inflated bytes per page" in json.dumps(out), out

    # one within every limit but slow, with a short deadline; a small text comes meanwhile
    deadline = 8.0
    before = _cpu(node_pid)
    started = time.perf_counter()
    slow_proc = _ingest_proc(a, "books", slow, "slow.pdf", deadline)
    wait_for(lambda: _spent(before, _cpu(node_pid)) > 0.5, timeout=60, what="the slow PDF to be read")
    busy = {p for p, v in _cpu(node_pid).items() if p != node_pid and v - before.get(p, 0.0) > 0.2}
    during, code, out = _answer(_ingest_proc(a, "garden", text, "basil.md", 120), 200)
    report(S, f"a small text during the slow PDF: {during:.2f}s (alone {alone:.2f}s)")
    assert code == 0 and out["output"]["chunks_indexed"] >= 1, out
    assert during < 5 * alone + 10
    took, code, out = _answer(slow_proc, deadline + 60)
    took = time.perf_counter() - started
    busy_cpu = _spent(before, _cpu(node_pid))
    report(S, f"the slow PDF answered after {took:.2f}s (deadline {deadline}s): {out}; {busy_cpu:.2f} CPU s")
    assert code != 0 and json.dumps(out).count("timeout") >= 1, out
    assert took < deadline + 5

    # the node's CPU after the answer: idle again (the worker that read it was killed)
    window = max(3.0, 2 * alone)
    rate_busy = busy_cpu / took
    mark = _cpu(node_pid)
    t0 = time.perf_counter()
    wait_for(lambda: time.perf_counter() - t0 >= window, timeout=window + 30, what="the window")
    rate_after = _spent(mark, _cpu(node_pid)) / (time.perf_counter() - t0)
    report(S, f"CPU: {rate_busy:.2f} cores while reading, {rate_after:.3f} after; workers {busy}")
    assert rate_after < max(0.15, rate_busy / 4)
    assert busy and all(_stat(p) is None for p in busy), busy
