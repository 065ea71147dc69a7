"""Small and busy devices (issue 33): queries while the node ingests a book, memory per profile.

Node A (the ``local`` preset: embedder, RAG, OCR) holds a small corpus; member B (the
``member`` profile, ``configs/member.toml``) asks A's corpus, one question at a time, through
its control socket: first with A idle, then while A ingests the 249-page Walden
(``en_walden_thoreau_249p.pdf``, through A's CLI), same run.  Rows: ``rag.query`` p50 idle and
during the ingest (target: during <= 2x idle), each profile's resident memory idle (``VmRSS``
once steady after start: full <= 250 MB, member <= 120 MB, pi reported) and A's peak
(``VmHWM``) over the ingest.  With ``--capped`` (root, a cgroup cpu controller) the book is
ingested again by a node held to half a core, and its time is reported.

    python -m bench.small [--quick] [--capped]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import SHARED_DATA, PeerMetric, machine, node_like_process, percentile
from hearthnet.client import AsyncClient
from hearthnet.contracts.rag import ingest_timeout
from hearthnet.errors import BusError
from hearthnet.testing import LocalMesh, MeshNode

BOOK = SHARED_DATA / "pdfs" / "en_walden_thoreau_249p.pdf"
NOTES = SHARED_DATA / "pdfs" / "en_paper_naacl06_shinyama_2col.pdf"
QUESTIONS = (
    "How are paraphrases found without supervision?",
    "Which named entities anchor the comparison of news articles?",
    "What is an extraction pattern?",
    "How were the results evaluated?",
)
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def memory_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of ``pid`` in MB (``/proc``)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(line.split()[1]) / 1024
    return out


def steady_rss(node: MeshNode, *, within_mb: float = 2.0, most_s: float = 20.0) -> float:
    """The node's ``VmRSS`` once two samples a second apart agree within ``within_mb``."""
    assert node.process is not None
    last = memory_mb(node.process.pid)["VmRSS"]
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        time.sleep(1.0)  # sampling interval of a measurement, not a wait for an event
        now = memory_mb(node.process.pid)["VmRSS"]
        if abs(now - last) <= within_mb:
            return now
        last = now
    return last


def with_profile(node: MeshNode, profile: str) -> None:
    """``configs/<profile>.toml`` as the node's config, keeping the name and listen ``init`` chose."""
    cfg = node.home / "config.toml"
    current = cfg.read_text()
    text = (CONFIGS / f"{profile}.toml").read_text()
    for key in ("name", "listen"):
        line = re.search(rf"^{key} = .*$", current, re.M)
        assert line is not None
        text = re.sub(rf"^{key} = .*$", line.group(0), text, count=1, flags=re.M)
    cfg.write_text(text)


async def _ask(home: Path, corpus: str, n: int | None, until: threading.Event | None) -> list[float]:
    """Questions one at a time: ``n`` of them, or until ``until`` is set; latencies in ms."""
    latencies: list[float] = []
    async with AsyncClient(home) as client:
        i = 0
        while (n is None or i < n) and not (until is not None and until.is_set()):
            query = QUESTIONS[i % len(QUESTIONS)]
            t = time.perf_counter()
            try:
                await client.call("rag.query", {"corpus": corpus}, {"query": query, "k": 5}, timeout=30)
            except BusError as exc:
                raise RuntimeError(f"rag.query failed ({exc.code}): {exc.message}") from exc
            latencies.append((time.perf_counter() - t) * 1000)
            i += 1
    return latencies


def _ingest_book(node: MeshNode, corpus: str, result: dict[str, Any], done: threading.Event) -> None:
    t = time.monotonic()
    try:
        out = node.cli_json(
            "ingest", str(BOOK), "--corpus", corpus, timeout=ingest_timeout(BOOK.stat().st_size) + 60
        )
        result["out"] = out
    except Exception as exc:  # reported in the row, the benchmark goes on
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        result["seconds"] = time.monotonic() - t
        done.set()


def _during_ingest(a: MeshNode, b: MeshNode) -> tuple[list[float], dict[str, Any], float]:
    """B's query latencies while A ingests the book; the ingest's outcome; A's peak VmHWM (MB)."""
    assert a.process is not None
    done = threading.Event()
    result: dict[str, Any] = {}
    worker = threading.Thread(target=_ingest_book, args=(a, "books", result, done))
    worker.start()
    try:
        latencies = anyio.run(_ask, b.home, "notes", None, done)
    finally:
        worker.join()
    peak = memory_mb(a.process.pid)["VmHWM"]
    return latencies, result, peak


def run(quick: bool = False, capped: bool = False) -> list[PeerMetric]:
    node_like_process()
    idle_n = 20 if quick else 40
    rows: list[PeerMetric] = []
    with tempfile.TemporaryDirectory() as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
        a = mesh.add("a")
        b = mesh.add("b")
        p = mesh.add("p")
        with_profile(b, "member")
        with_profile(p, "pi")
        mesh.found(a)
        mesh.invite(a, b, "member")
        mesh.invite(a, p, "member")
        mesh.wait_full_mesh(timeout=120)
        idle = {name: steady_rss(n) for name, n in (("full", a), ("member", b), ("pi", p))}
        p.stop()
        a.cli_json("ingest", str(NOTES), "--corpus", "notes", timeout=600)
        anyio.run(_ask, b.home, "notes", 4, None)  # warm: the query model loaded, caches filled
        before = anyio.run(_ask, b.home, "notes", idle_n, None)
        during, ingest, peak = _during_ingest(a, b)
        after = anyio.run(_ask, b.home, "notes", idle_n, None)
    rows.extend(_memory_rows(idle, peak, ingest))
    rows.append(_query_row(before, during, after, ingest))
    if capped:
        rows.append(_capped_ingest())
    return rows


def _memory_rows(idle: dict[str, float], peak: float, ingest: dict[str, Any]) -> list[PeerMetric]:
    targets = {"full": 250.0, "member": 120.0}
    rows = [
        PeerMetric(
            "small",
            f"small: {name} node resident memory idle (VmRSS)",
            "MB",
            round(mb, 1),
            None,
            "",
            f"<= {targets[name]:.0f} MB" if name in targets else "(reported)",
            mb <= targets[name] if name in targets else None,
            note=f"configs/{'local' if name == 'full' else name}.toml; steady after start, no corpus",
        )
        for name, mb in idle.items()
    ]
    out = ingest.get("out") or {}
    chunks = sum(r.get("chunks_indexed", 0) for r in out.get("results", []))
    rows.append(
        PeerMetric(
            "small",
            "small: full node peak resident memory over the 249-page ingest (VmHWM)",
            "MB",
            round(peak, 1),
            None,
            "",
            "(reported)",
            None,
            note=f"ingest {ingest.get('seconds', 0):.0f} s, {chunks} chunks, "
            f"{'ok' if 'out' in ingest else ingest.get('error', '')}",
        )
    )
    return rows


def _query_row(
    before: list[float], during: list[float], after: list[float], ingest: dict[str, Any]
) -> PeerMetric:
    idle = before + after
    idle_p50, during_p50 = percentile(idle, 0.5), percentile(during, 0.5) if during else float("nan")
    ok = "out" in ingest and bool(during)
    return PeerMetric(
        "small",
        "small: rag.query p50 while the node ingests a 249-page book (peer: the same node idle)",
        "ms",
        round(during_p50, 1),
        round(idle_p50, 1),
        "same node idle, same run",
        "<= 2x idle",
        ok and during_p50 <= 2 * idle_p50,
        ours_min=round(min(during), 1) if during else None,
        ours_max=round(max(during), 1) if during else None,
        peer_min=round(min(idle), 1),
        peer_max=round(max(idle), 1),
        note=f"{len(during)} questions during the ingest ({ingest.get('seconds', 0):.0f} s), p90 "
        f"{percentile(during, 0.9) if during else 0:.0f} ms; idle: {len(before)} before and "
        f"{len(after)} after, p50 before {statistics.median(before):.0f} ms, after "
        f"{statistics.median(after):.0f} ms; load {machine()['load_avg_1m']}",
    )


def _capped_ingest() -> PeerMetric:
    """The book ingested by a node held to half a core (a cgroup), its time."""
    from tests.cpu_cap import CpuCapUnavailable, cpu_capped

    name = "small: 249-page book ingested at half a core (cgroup cpu quota)"
    with tempfile.TemporaryDirectory() as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
        c = mesh.add("c")
        mesh.found(c)
        assert c.process is not None
        try:
            with cpu_capped(c.process.pid, 0.5):
                done = threading.Event()
                result: dict[str, Any] = {}
                _ingest_book(c, "books", result, done)
        except CpuCapUnavailable as exc:
            return PeerMetric("small", name, "s", None, None, "", "(reported)", None, note=str(exc))
    out = result.get("out") or {}
    chunks = sum(r.get("chunks_indexed", 0) for r in out.get("results", []))
    return PeerMetric(
        "small",
        name,
        "s",
        round(result["seconds"], 1),
        None,
        "",
        "completes",
        "out" in result and chunks > 0,
        note=f"{chunks} chunks; {'ok' if 'out' in result else result.get('error', '')}",
    )


def bench_metrics(quick: bool) -> list[PeerMetric]:
    return run(quick)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--capped", action="store_true", help="also ingest the book at half a core")
    args = parser.parse_args()
    print(json.dumps([m.to_json() for m in run(args.quick, args.capped)], indent=2))


if __name__ == "__main__":
    main()
