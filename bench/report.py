"""Render benchmark results: the peers and floors tables in Markdown and the rag.query latency plot.

python -m bench.report [bench/results/latest.json]   # prints the tables again
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def is_peer(m: Mapping[str, Any]) -> bool:
    """A row of the peers table (``PeerMetric``), or a peers benchmark that failed to run."""
    return m.get("kind") == "peer"


def _miss(m: Mapping[str, Any]) -> str:
    """How far a failed figure is from its target, in the target's own terms where possible.

    A target of several clauses ("<= 0.5 ms and <= 2x floor") names each clause it misses.
    """
    clauses = [c.strip() for c in str(m.get("target", "")).split(" and ")]
    missed = [text for clause in clauses if (text := _clause_miss(m, clause))]
    return "; ".join(missed) if missed else "misses"


def _clause_miss(m: Mapping[str, Any], clause: str) -> str | None:
    """The miss of one clause of a target, ``None`` if it holds (or cannot be read)."""
    ratio, ours, floor = m.get("ratio"), m["ours"], m.get("floor")
    plus = re.search(r"\+\s*([\d.]+)\s*ms", clause)
    if plus and floor is not None:
        limit = float(floor) + float(plus.group(1))
        return None if ours <= limit else f"misses by {ours - limit:.3g} ms ({ours:.3g} vs {limit:.3g})"
    mult = re.search(r"([<>]=)\s*([\d.]+)x", clause)
    if mult and ratio is not None:
        limit = float(mult.group(2))
        if (ratio <= limit) if mult.group(1) == "<=" else (ratio >= limit):
            return None
        return f"misses by {abs(ratio - limit) / limit:.0%} ({ratio:.2f}x vs {limit:g}x)"
    pct = re.search(r">=\s*(\d+)%", clause)
    if pct and ratio is not None:
        if ratio * 100 >= float(pct.group(1)):
            return None
        return f"misses by {float(pct.group(1)) - ratio * 100:.0f} points ({ratio:.0%} of floor)"
    absolute = re.search(r"([<>]=)\s*([\d.]+)\s*(ms|/s)?", clause)
    if absolute:
        limit = float(absolute.group(2))
        if (ours <= limit) if absolute.group(1) == "<=" else (ours >= limit):
            return None
        return f"misses by {abs(ours - limit):.3g} {m.get('unit', '')} ({ours:.3g} vs {limit:g})"
    return None


def _with_range(value: float, lo: float | None, hi: float | None, unit: str) -> str:
    text = f"{_num(value)} {unit}"
    if lo is not None and hi is not None:
        text += f" ({_num(lo)}-{_num(hi)})"
    return text


def peers_table(metrics: Iterable[Mapping[str, Any]]) -> str:
    """Ours beside what a user would otherwise run: metric, ours, peer, ratio, target, result."""
    rows = [
        "| metric | ours: median (min-max) | peer: median (min-max) | ratio | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for m in metrics:
        if not is_peer(m):
            continue
        if m.get("failed"):
            rows.append(
                f"| {m['name']}: **failed to run** | - | - | - | - | FAIL: {m.get('note', '')[:200]} |"
            )
            continue
        name = m["name"] + (f" — {m['note']}" if m.get("note") else "")
        if m.get("ours") is None:
            rows.append(f"| {name} | not measured | - | - | {m['target']} | not measured |")
            continue
        ours = _with_range(m["ours"], m.get("ours_min"), m.get("ours_max"), m["unit"])
        peer = "-"
        if m.get("peer") is not None:
            peer = _with_range(m["peer"], m.get("peer_min"), m.get("peer_max"), m["unit"])
            peer += f" ({m['peer_name']})"
        ratio = "-" if m.get("ratio") is None else f"{m['ratio']:.2f}x"
        passed = m.get("passed")
        result = "reported" if passed is None else ("pass" if passed else f"**FAIL**, {_miss(m)}")
        rows.append(f"| {name} | {ours} | {peer} | {ratio} | {m['target']} | {result} |")
    return "\n".join(rows)


def markdown_table(metrics: Iterable[Mapping[str, Any]]) -> str:
    """Ours beside a floor measured in the same run (the rows that are not against a peer)."""
    rows = [
        "| benchmark | metric | ours: median (min-max) | floor | ratio | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in metrics:
        if is_peer(m):
            continue
        if m.get("failed"):
            rows.append(
                f"| {m['issue']} | **failed to run** | - | - | - | - | FAIL: {m.get('note', '')[:200]} |"
            )
            continue
        ours = f"{_num(m['ours'])} {m['unit']}"
        if m.get("ours_min") is not None and m.get("ours_max") is not None:
            ours += f" ({_num(m['ours_min'])}-{_num(m['ours_max'])})"
        ratio = "-" if m.get("ratio") is None else f"{m['ratio']:.2f}x"
        passed = m.get("passed")
        result = "reported" if passed is None else ("pass" if passed else f"**FAIL**, {_miss(m)}")
        name = m["name"] + (f" — {m['note']}" if m.get("note") else "")
        floor = _num(m.get("floor"))
        rows.append(f"| {m['issue']} | {name} | {ours} | {floor} | {ratio} | {m['target']} | {result} |")
    return "\n".join(rows)


def plot_rag_latency(plot: Mapping[str, Any], out: Path) -> Path | None:
    """rag.query p50 against corpus size for local and remote callers (and the floor), min-max bars."""
    if not plot.get("sizes"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = plot["sizes"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for key, label, style in (
        ("local", "rag.query, local caller (member bus)", "o-"),
        ("remote", "rag.query, remote caller (via another node)", "s-"),
        ("floor", "floor: in-process embed + exact search", "^--"),
    ):
        vals = plot.get(key) or []
        if not vals:
            continue
        med = [v[0] for v in vals]
        lo = [v[0] - v[1] for v in vals]
        hi = [v[2] - v[0] for v in vals]
        ax.errorbar(sizes[: len(vals)], med, yerr=[lo, hi], fmt=style, capsize=4, label=label)
    ax.set_xscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{s // 1000}k" for s in sizes])
    ax.set_xlabel("chunks in the corpus")
    ax.set_ylabel("p50 latency (ms), median of rounds, min-max bars")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("rag.query latency vs corpus size (k = 10)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "latest.json"
    data = json.loads(path.read_text())
    print(peers_table(data["metrics"]) + "\n\n" + markdown_table(data["metrics"]))


if __name__ == "__main__":
    main()
