"""Every benchmark, one after another; results to ``bench/results/latest.{json,md}``.

    python -m bench.run [--quick] [--only bus,rag]

A benchmark that raises is reported as failed (with its error) and the others
still run.  Every figure is a median of repeated rounds with min-max, beside
what a user would otherwise run (a peer, ``bench.peers_*``) or a floor, measured
in the same run (see ``specs/benchmarks.md``).  ``latest.md`` shows the peers
table above the floors table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import time
import traceback
from typing import Any

from bench.common import cpu_ticks, machine, steal_pct
from bench.report import RESULTS, markdown_table, peers_table, plot_rag_latency

BENCHMARKS = (
    "bus",
    "peers_bus",
    "blobs",
    "embed",
    "rag",
    "peers_rag",
    "answer",
    "peers_answer",
    "scifact",
    "hybrid",
    "ocr",
    "replicas",
    "load",
    "drafts",
    "small",
    "folders",
    "fuzz",
    "ui",
    "lan_addresses",
    "wake",
    "chroma_door",
)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHMARKS))
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    started = _now()
    metrics: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    plot: dict[str, Any] = {}
    for name in names:
        t0 = time.perf_counter()
        entry: dict[str, Any] = {
            "benchmark": name,
            "started": _now(),
            "load_avg_1m_before": machine()["load_avg_1m"],
        }
        print(f"== bench.{name} {'(quick)' if args.quick else ''}", flush=True)
        ticks = cpu_ticks()
        try:
            module = importlib.import_module(f"bench.{name}")
            if name == "rag":
                got = module.run(args.quick, plot_out=plot)
            else:
                got = getattr(module, "bench_metrics", module.run)(args.quick)
            rows = [m.to_json() for m in got]
            entry["ok"] = True
        except Exception as exc:  # one failing benchmark must not stop the others
            traceback.print_exc()
            rows = [
                {
                    "issue": name,
                    "name": f"bench.{name}",
                    "failed": True,
                    "passed": False,
                    "note": f"{type(exc).__name__}: {exc}",
                }
            ]
            if name.startswith("peers_"):
                rows[0]["kind"] = "peer"
            entry["ok"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        entry["load_avg_1m_after"] = machine()["load_avg_1m"]
        entry["cpu_steal_pct"] = steal_pct(ticks, cpu_ticks())
        runs.append(entry)
        metrics.extend(rows)
        print(f"   {name}: {entry['seconds']} s, {'ok' if entry['ok'] else 'FAILED'}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "quick": args.quick,
        "started": started,
        "finished": _now(),
        "machine": machine(),
        "runs": runs,
        "metrics": metrics,
        "rag_latency_plot": plot,
    }
    (RESULTS / "latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    png = None
    if plot:
        try:  # the figures are written already: a plotting failure must not lose them
            png = plot_rag_latency(plot, RESULTS / "rag_latency.png")
        except Exception as exc:
            print(f"   (no plot: {type(exc).__name__}: {exc})", flush=True)
    m = doc["machine"]
    table = (
        "## Against peers (what a user would otherwise run, same run)\n\n"
        + peers_table(metrics)
        + "\n\n## Against floors (the physical limit of each path, same run)\n\n"
        + markdown_table(metrics)
    )
    header = (
        f"# Benchmarks ({'quick' if args.quick else 'full'} run)\n\n"
        f"{started} - {doc['finished']}; {m['cores']} cores, 1-min load {m['load_avg_1m']} at the end, "
        f"Python {m['python']}, {m['platform']}.\n"
        "Per benchmark (CPU time stolen by the hypervisor for other guests): "
        + ", ".join(f"{r['benchmark']} {r['seconds']} s ({r['cpu_steal_pct']}% stolen)" for r in runs)
        + ".\n\n"
    )
    footer = f"\n\n![rag.query latency]({png.name})\n" if png else "\n"
    (RESULTS / "latest.md").write_text(header + table + footer)
    print(table)
    failed = [r for r in metrics if r.get("passed") is False]
    print(f"\n{len(metrics)} figures, {len(failed)} below target; wrote {RESULTS / 'latest.json'}")


if __name__ == "__main__":
    main()
