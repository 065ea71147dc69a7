"""The web UI: how fast a page loads in the browser, and what an API call through it costs.

Page load (ours): Debian's headless Chromium loads each page of a signed-in node (Ask,
Library, Mesh) and reports its Navigation Timing: ``loadEventEnd`` (HTML, stylesheet and
scripts) and, reported beside it, when the page's data is on screen.  Floor, same run: the
same browser loading the UI's icon (a document with nothing to fetch after it).

API call (ours): ``GET /api/node`` (one ``node.info`` through the UI: Host check, session,
allow-list, JSON) from a kept-alive HTTP client.  Floor, same run and interleaved:
``node.info`` through ``hearthnet.client.AsyncClient`` with kept connections.  Target: at
most 5 ms more at p50.

    python -m bench.ui [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.common import Metric, machine, median_range, node_like_process, percentile
from hearthnet.client import AsyncClient
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.testing import LocalMesh, MeshNode

PAGES = (("ask", "#question"), ("library", "#corpora"), ("mesh", "#nodes tbody tr"))
READY = {  # the page's first API answers are drawn
    "ask": "document.getElementById('corpora-options').childElementCount > 0",
    "library": "!document.getElementById('corpora-empty').hidden || document.querySelector('#corpora tr td')",
    "mesh": "document.querySelector('#nodes tbody tr')",
}


def _sign_in(node: MeshNode) -> tuple[str, str]:
    link = str(node.cli_json("ui")["link"])
    return link.split("/login#", 1)[0], link


def page_loads(base: str, link: str, loads: int) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Navigation Timing of each page ``loads`` times: load event, data on screen; and the floor."""
    from tests.ui.harness import browser_missing, chromium

    reason = browser_missing()
    if reason is not None:
        raise RuntimeError(reason)
    loaded: dict[str, list[float]] = {name: [] for name, _ in PAGES}
    ready: list[float] = []
    floor: list[float] = []
    with chromium() as driver:
        driver.get(link)
        deadline = time.monotonic() + 30
        while not driver.current_url.endswith("/ask"):
            if time.monotonic() > deadline:
                raise RuntimeError("the sign-in link did not lead to the Ask page")
            time.sleep(0.05)
        for _ in range(loads):
            for name, _sel in PAGES:
                driver.get(f"{base}/{name}")
                started = time.monotonic()
                while not driver.execute_script(f"return !!({READY[name]})"):
                    if time.monotonic() - started > 30:
                        raise RuntimeError(f"the {name} page never showed its data")
                    time.sleep(0.002)
                timing = driver.execute_script(
                    "const n = performance.getEntriesByType('navigation')[0];"
                    "return [n.loadEventEnd - n.startTime, performance.now()];"
                )
                loaded[name].append(float(timing[0]))
                ready.append(float(timing[1]))
            driver.get(f"{base}/static/icon.svg")
            floor.append(
                float(
                    driver.execute_script(
                        "const n = performance.getEntriesByType('navigation')[0];"
                        "return n.loadEventEnd - n.startTime;"
                    )
                )
            )
    return loaded, ready, floor


async def api_calls(
    node: MeshNode, base: str, link: str, calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """p50 of each round, through the UI and through the client, rounds interleaved."""
    through_ui: list[float] = []
    through_client: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as http, AsyncClient(node.home) as client:
        response = await http.post("/api/login", json={"token": link.split("#", 1)[1]})
        response.raise_for_status()
        for _ in range(rounds):
            ui: list[float] = []
            direct: list[float] = []
            for _ in range(calls):
                t0 = time.perf_counter()
                r = await http.get("/api/node")
                ui.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200
                t0 = time.perf_counter()
                await client.call("node.info")
                direct.append((time.perf_counter() - t0) * 1000)
            through_ui.append(percentile(ui, 0.5))
            through_client.append(percentile(direct, 0.5))
    return through_ui, through_client


def run(quick: bool = False) -> list[Metric]:
    node_like_process()
    loads, calls, rounds = (5, 200, 3) if quick else (15, 500, 5)
    with tempfile.TemporaryDirectory() as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env.update({"HEARTHNET_LOG_LEVEL": "warning", "HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
        node = mesh.add("bench", env={"HEARTHNET_EMBEDDING": "0"})
        mesh.found(node)
        base, link = _sign_in(node)
        ui, direct = anyio.run(
            api_calls, node, base, link, calls, rounds, backend_options=event_loop_options()
        )
        metrics = _api_metrics(ui, direct, calls)
        try:
            loaded, ready, floor = page_loads(base, _sign_in(node)[1], loads)
        except RuntimeError as exc:
            metrics.append(
                Metric(
                    "ui", "page load in the browser", "ms", 0.0, None, None, "<= 300 ms", False, note=str(exc)
                )
            )
            return metrics
    f = median_range(floor)[0]
    for name, values in loaded.items():
        o, lo, hi = median_range(values)
        metrics.append(
            Metric(
                "ui",
                f"page load: {name} (Navigation Timing, loadEventEnd)",
                "ms",
                round(o, 1),
                round(f, 1),
                round(o / f, 2) if f else None,
                "<= 300 ms",
                o <= 300,
                round(lo, 1),
                round(hi, 1),
                note=f"{len(values)} loads; floor: the icon alone",
            )
        )
    r, r_lo, r_hi = median_range(ready)
    metrics.append(
        Metric(
            "ui",
            "page shows its data (Ask, Library, Mesh)",
            "ms",
            round(r, 1),
            None,
            None,
            "(reported)",
            None,
            round(r_lo, 1),
            round(r_hi, 1),
            note="performance.now() once the page's first API answers are drawn",
        )
    )
    return metrics


def _api_metrics(ui: list[float], direct: list[float], calls: int) -> list[Metric]:
    o, lo, hi = median_range(ui)
    f = median_range(direct)[0]
    extra = o - f
    return [
        Metric(
            "ui",
            "API call through the UI: GET /api/node (node.info), p50",
            "ms",
            round(o, 3),
            round(f, 3),
            round(o / f, 2) if f else None,
            "<= client p50 + 5 ms",
            extra <= 5.0,
            round(lo, 3),
            round(hi, 3),
            note=f"{len(ui)} rounds of {calls} calls; floor: node.info through AsyncClient "
            f"(kept connections); +{extra:.3f} ms",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
