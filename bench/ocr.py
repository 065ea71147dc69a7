"""``ocr.page``: time per page and peak memory, through a peer, beside RapidOCR called directly.

Ours: a node that holds the scans but has no OCR (``HEARTHNET_OCR=0``) calls
``ocr.page {doc_cid, page}``; the bus routes it to a second node process (the
OCR node, no embedder and no RAG), which fetches the PDF from the first,
renders the page at 200 dpi and recognises it.  Time is the caller's wall
clock per page after one warm-up page; peak RSS is the OCR node's own
(``VmHWM`` of its process).

Floor, same run, interleaved round by round: a child process that builds
RapidOCR from the same bundled model files and calls it on the same page
images (rendered once here with the service's renderer, saved as PNG): the
recognition alone, and the child's own peak RSS (``ru_maxrss``).

    python -m bench.ocr [--quick]
    python -m bench.ocr --direct PNG...     # the floor's child (prints one JSON line)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import SHARED_DATA, Metric, machine, median_range, node_like_process
from hearthnet.testing import LocalMesh, MeshNode, wait_for

PDFS = SHARED_DATA / "pdfs"
SCANNED = PDFS / "scanned_image_only_no_text.pdf"
VICKSBURG = PDFS / "scanned_with_ocr_text_layer.pdf"
DPI = 200


def direct(paths: list[str]) -> dict[str, Any]:
    """The floor, in this (child) process: RapidOCR on each PNG, recognition time only."""
    from PIL import Image
    from rapidocr import RapidOCR

    from hearthnet.services.ocr.engine import find_model_files

    node_like_process()
    t = time.perf_counter()
    params: dict[str, Any] = {"Global.log_level": "error"}
    for stage, path in find_model_files().items():
        params[f"{stage}.model_path"] = str(path)
    engine = RapidOCR(params=params)
    with Image.open(paths[0]) as first:
        engine(first.convert("RGB"))  # builds the sessions (RapidOCR loads them on its first page)
    load_ms = (time.perf_counter() - t) * 1000
    ms: list[float] = []
    lines: list[int] = []
    for path in paths:  # one page in memory at a time, as in the service
        with Image.open(path) as png:
            image = png.convert("RGB")
        t = time.perf_counter()
        out = engine(image)
        ms.append((time.perf_counter() - t) * 1000)
        lines.append(len(out.txts or ()))
        del image, out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"ms": ms, "lines": lines, "load_ms": load_ms, "peak_rss_mb": peak}


def _floor(pngs: list[Path]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ocr", "--direct", *map(str, pngs)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the floor's child failed: {proc.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _peak_rss_mb(node: MeshNode) -> float:
    assert node.process is not None
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


def run(quick: bool = False) -> list[Metric]:
    from hearthnet.client import Client
    from hearthnet.services.ocr.pages import render_pdf_page

    node_like_process()
    pages = [(SCANNED, 1)] + [(VICKSBURG, p) for p in ((1, 2) if quick else range(1, 7))]
    rounds = 2 if quick else 3
    ours_ms: list[float] = []
    floor_ms: list[float] = []
    floor_rss: list[float] = []
    floor_load: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hn-ocr-") as tmp, LocalMesh(Path(tmp)) as mesh:
        mesh.env.update({"HEARTHNET_RAG": "0", "HEARTHNET_EMBEDDING": "0", "HEARTHNET_LOG_LEVEL": "warning"})
        ocr = mesh.add("ocr")
        far = mesh.add("far", env={"HEARTHNET_OCR": "0"})
        mesh.found(ocr)
        mesh.invite(ocr, far, "member")
        mesh.wait_full_mesh([ocr, far])
        wait_for(
            lambda: any(c["capability"] == "ocr.page@1.0" for c in far.status()["capabilities"]),
            timeout=60,
            what="far to see ocr.page",
        )
        cids = {path: far.cli_json("file", "put", str(path))["doc_cid"] for path in (SCANNED, VICKSBURG)}
        pngs: list[Path] = []
        for path, page in pages:
            png = Path(tmp) / f"{path.stem}-{page}.png"
            render_pdf_page(path.read_bytes(), page, DPI).image.save(png)
            pngs.append(png)
        client = Client(far.home)

        def call(path: Path, page: int) -> tuple[float, dict[str, Any]]:
            t = time.perf_counter()
            res = client.call("ocr.page", input={"doc_cid": cids[path], "page": page}, timeout=600)
            assert res.provider == ocr.node_id
            return (time.perf_counter() - t) * 1000, res.output

        cold_ms, _ = call(*pages[0])  # loads the engine, fetches the scan from far
        call(VICKSBURG, pages[1][1])  # and the other PDF
        lines: list[int] = []
        for _ in range(rounds):
            floor = _floor(pngs)
            floor_ms.extend(floor["ms"])
            floor_rss.append(floor["peak_rss_mb"])
            floor_load.append(floor["load_ms"])
            lines = []
            for path, page in pages:
                ms, output = call(path, page)
                ours_ms.append(ms)
                lines.append(len(output["lines"]))
        ours_rss = _peak_rss_mb(ocr)
    o_med, o_lo, o_hi = median_range(ours_ms)
    f_med = median_range(floor_ms)[0]
    f_rss = median_range(floor_rss)[0]
    note = (
        f"{len(pages)} pages ({SCANNED.name} p1, {VICKSBURG.name} p{pages[1][1]}-{pages[-1][1]}) "
        f"x {rounds} rounds at {DPI} dpi, {sum(lines)} lines a round; first page with the engine's "
        f"load {cold_ms:,.0f} ms (direct: load and first page {median_range(floor_load)[0]:,.0f} ms)"
    )
    return [
        Metric(
            "ocr",
            "ocr.page time per page, {doc_cid, page} through a peer (fetch, render, recognise)",
            "ms",
            round(o_med, 1),
            round(f_med, 1),
            round(o_med / f_med, 3),
            "<= 1.15x direct RapidOCR",
            o_med <= 1.15 * f_med,
            round(o_lo, 1),
            round(o_hi, 1),
            note=note,
        ),
        Metric(
            "ocr",
            "ocr.page peak RSS of the OCR node process",
            "MB",
            round(ours_rss, 1),
            round(f_rss, 1),
            round(ours_rss / f_rss, 3),
            "<= 1.3x direct RapidOCR",
            ours_rss <= 1.3 * f_rss,
            note="floor: a child process with RapidOCR alone, same pages",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--direct", nargs="+", metavar="PNG")
    args = parser.parse_args()
    if args.direct:
        print(json.dumps(direct(args.direct)))
        return
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
