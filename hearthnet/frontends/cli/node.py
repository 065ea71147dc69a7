"""Commands about the running node and its log: ``status``, ``call`` (any capability) and ``events``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hearthnet.contracts.node import NodeClient
from hearthnet.frontends.cli.args import load_json
from hearthnet.frontends.cli.output import emit, jsonable, shown
from hearthnet.frontends.cli.replicas import own_replicas, replica_lines
from hearthnet.frontends.client.client import Client
from hearthnet.frontends.client.corpora import seen_text

__all__ = ["add_call", "add_events", "add_status"]

EVENTS_PAGE = 1000
"""Events asked for per ``events.list`` call by ``hearthnet events``."""


def cmd_status(args: argparse.Namespace) -> None:
    client = Client(args.home)
    st = client.run(lambda c: NodeClient(c).status())
    st["replicas"] = own_replicas(client)

    def human() -> None:
        print(f"node       {st['node_id']} ({st.get('name', '')})")
        if st.get("community_id") is None:
            print(
                "community  none: found one with 'hearthnet community create NAME' "
                "or join one with 'hearthnet join TOKEN'"
            )
        else:
            print(f"community  {st.get('community_name') or '-'} ({st['community_id']})")
        revoked = st.get("revoked")
        if revoked:
            why = f" ({shown(revoked['reason'])})" if revoked.get("reason") else ""
            print(f"level      revoked by {revoked['by']} at {revoked['at']}{why}")
        else:
            print(f"level      {st.get('level') or '-'}")
        print(f"listening  {', '.join(st.get('addresses', [])) or '-'}")
        print(f"discovery  {discovery_line(st.get('discovery'))}")
        print(f"peers      {len(st.get('peers', []))}")
        for p in st.get("peers", []):
            heard = f"  heard {p['last_heard_s']:g} s ago" if "last_heard_s" in p else ""
            level = p.get("level") or "?"
            print(f"  {p['node_id']}  {level:8} {p.get('address', '')}  {p.get('name', '')}{heard}")
        offline = st.get("offline", [])
        if offline:
            print(f"offline    {len(offline)}")
        for p in offline:
            level = p.get("level") or "?"
            print(f"  {p['node_id']}  {level:8} {p.get('name', '') or '-'}  {seen_text(p)}")
        for line in replica_lines(st["replicas"]):
            print(f"replicas   {line}")
        print("capabilities")
        print(capability_table(st.get("capabilities", [])))

    emit(args, st, human)


def discovery_line(state: dict[str, Any] | None) -> str:
    """``status``'s word on LAN discovery: off, not working (and why), or how many it found."""
    if not state or not state.get("enabled"):
        return "off ([network] discovery = false)"
    if not state.get("working"):
        return f"not working: {shown(str(state.get('error') or 'not announced yet'))}"
    return f"on the LAN, {len(state.get('found') or {})} member(s) found"


def capability_table(caps: list[dict[str, Any]]) -> str:
    """``status``'s capabilities, one per line, in columns as wide as their longest entry."""
    rows = [
        (
            shown(str(c["capability"])),
            shown(json.dumps(c.get("params", {}), ensure_ascii=False)),
            "local" if c.get("local") else str(c["node"]),
        )
        for c in caps
    ]
    if not rows:
        return "  -"
    name_width = max(len(r[0]) for r in rows)
    params_width = max(len(r[1]) for r in rows)
    return "\n".join(
        f"  {name:{name_width}}  {params:{params_width}}  {where}" for name, params, where in rows
    )


def cmd_call(args: argparse.Namespace) -> None:
    params = load_json(args.params, "--params")
    inp = load_json(args.input, "--input")
    result = Client(args.home).call(
        args.capability, params, inp, timeout=args.timeout, provider=args.provider
    )
    document = {"output": result.output, "meta": result.meta, "provider": result.provider}
    emit(args, document, lambda: print(json.dumps(jsonable(document), indent=2, ensure_ascii=False)))


def cmd_events(args: argparse.Namespace) -> None:
    client = Client(args.home)
    events: list[dict[str, Any]] = []
    after: Any = None
    while True:  # page by page: a long-lived community's log does not fit one answer
        page = client.run(lambda c: NodeClient(c).events(limit=EVENTS_PAGE, after=after))  # noqa: B023 (run at once)
        batch = page.get("events", [])
        if args.json:
            events.extend(batch)
        else:
            for e in batch:
                ignored = "" if e.get("effective", True) else "  (no effect)"
                data = shown(json.dumps(e.get("data", {}), ensure_ascii=False)[:100])
                print(
                    f"{e['lamport']:>6}  {e['event_id']}  {shown(str(e['event_type'])):24} "
                    f"{e['author'][:20]}…  {data}{ignored}"
                )
        after = page.get("next")
        if after is None or not batch:
            break
    if args.json:
        emit(args, {"events": events}, lambda: None)


def add_status(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help="node, community, peers and capabilities")
    p.set_defaults(func=cmd_status)


def add_call(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("call", parents=[common], help="call a capability through this node's bus")
    p.add_argument("capability", help="NAME or NAME@X.Y, e.g. node.ping or rag.query@1.0")
    p.add_argument(
        "--params",
        metavar="JSON",
        help='JSON object of the parameters that choose a provider, e.g. {"corpus": "family"} (default: {})',
    )
    p.add_argument(
        "--input", metavar="JSON", help='JSON object the capability works on, e.g. {"k": 5} (default: {})'
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="deadline of the call (default: the capability's own deadline)",
    )
    p.add_argument(
        "--provider", metavar="NODE_ID", help="node that must serve the call (default: the bus chooses)"
    )
    p.set_defaults(func=cmd_call)


def add_events(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("events", parents=[common], help="the local event log in replay order")
    p.set_defaults(func=cmd_events)
