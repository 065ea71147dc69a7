"""What ``hearthnet doctor`` checks: everything that stands between this node and its community.

Each check adds :class:`Finding` s (``ok``, ``note`` or ``problem``: a problem blocks normal use)
and the facts it saw.  The node is asked through its control socket; its peers are asked to dial
this node back at each address it advertises (``node.dial_back``) and for their clock
(``node.ping``); the node's own port is dialled from this device as well, so that "nothing
listens", "a firewall here drops it" and "the peers cannot reach it" are told apart.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import anyio

from hearthnet.bus.manifest import MANIFEST_TTL_MS
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rag import PERSONAL, SYSTEM, RagClient
from hearthnet.errors import BusError, NotFound
from hearthnet.frontends.client.client import AsyncClient, no_home
from hearthnet.frontends.client.corpora import seen_text
from hearthnet.transport.probe import PROBE_SECONDS, dial

__all__ = [
    "CLOCK_NOTE_SECONDS",
    "Diagnosis",
    "Finding",
    "diagnose",
    "firewall_hint",
    "judge_clocks",
    "judge_reach",
]

CLOCK_PROBLEM_SECONDS = MANIFEST_TTL_MS / 1000
"""A peer's clock this far off makes its signed capability lists expire before they arrive (or
ours, for it): its capabilities vanish from the mesh."""
CLOCK_NOTE_SECONDS = 5.0
"""Clocks this far apart are worth fixing before they drift further (signed times look odd)."""
CALL_SECONDS = PROBE_SECONDS + 5.0
DIAL_BACKS_PER_PEER = 2
"""A peer serves two ``node.dial_back`` calls at a time."""


@dataclass(frozen=True)
class Finding:
    check: str
    level: str
    """``ok``, ``note`` (worth knowing) or ``problem`` (blocks normal use)."""
    message: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"check": self.check, "level": self.level, "message": self.message}
        return {**out, "hint": self.hint} if self.hint else out


@dataclass
class Diagnosis:
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, check: str, level: str, message: str, hint: str = "") -> None:
        self.findings.append(Finding(check, level, message, hint))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "problem"]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "problems": len(self.problems),
            "findings": [f.to_json() for f in self.findings],
            **self.facts,
        }


def firewall_hint(port: int, system: str | None = None) -> str:
    """How to let peers in on ``port``, for this operating system."""
    system = system or platform.system()
    if system == "Darwin":
        return "allow incoming connections for Python in System Settings > Network > Firewall > Options"
    if system == "Windows":
        return (
            'netsh advfirewall firewall add rule name="HearthNet" dir=in action=allow '
            f"protocol=TCP localport={port}"
        )
    return (
        f"allow TCP port {port} in the firewall: 'sudo ufw allow {port}/tcp' (ufw), "
        f"'sudo firewall-cmd --permanent --add-port={port}/tcp && sudo firewall-cmd --reload' "
        f"(firewalld), or an nft/iptables accept rule for tcp dport {port}"
    )


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def _is_loopback(host: str) -> bool:
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _is_wildcard(host: str) -> bool:
    try:
        return ip_address(host).is_unspecified
    except ValueError:
        return False


async def diagnose(home: Path) -> Diagnosis:
    """Run every check against the node of ``home`` (running or not)."""
    d = Diagnosis()
    missing = no_home(home)
    if missing is not None:
        d.add("node", "problem", missing.message)
        return d
    from hearthnet.config import load_config

    config = load_config(home)
    listen = f"{config.network.listen_host}:{config.network.listen_port}"
    d.facts["listen"] = listen
    async with AsyncClient(home) as client:
        try:
            status: dict[str, Any] = await NodeClient(client).status(timeout=10)
        except BusError as exc:
            d.add("node", "problem", f"the node does not answer: {exc.message}")
            _check_ui(d, config, running=False)
            return d
        names = {p["node_id"]: p.get("name") or p["node_id"][:16] for p in status.get("peers", [])}
        names[status["node_id"]] = f"{status.get('name') or 'this node'} (this node)"
        d.facts["node"] = {k: status.get(k) for k in ("node_id", "name", "community_id", "level")}
        _check_community(d, status)
        addresses = list(status.get("addresses", []))
        d.facts["addresses"] = addresses
        _check_addresses(d, addresses, listen)
        await _check_port(d, addresses, listen)
        await _check_reach(d, client, addresses, status.get("peers", []))
        _check_members(d, status)
        await _check_clock(d, client, status.get("peers", []))
        _check_discovery(d, status)
        _check_ui(d, config, running=True)
        _check_models(d, status, config.rag.enabled, config.rag.embedding_model, names)
        await _check_replicas(d, client, status)
    return d


def _check_community(d: Diagnosis, status: Mapping[str, Any]) -> None:
    if status.get("community_id") is None:
        d.add(
            "community",
            "problem",
            "this node is in no community",
            "found one with 'hearthnet community create NAME' or join one with 'hearthnet join TOKEN'",
        )
    elif status.get("revoked"):
        d.add("community", "problem", f"this node was revoked by {status['revoked'].get('by')}")
    else:
        d.add("community", "ok", f"member of {status.get('community_name') or '-'} as {status.get('level')}")


def _check_addresses(d: Diagnosis, addresses: Sequence[str], listen: str) -> None:
    if not addresses:
        d.add("address", "problem", "the node advertises no address: it is not listening for peers")
        return
    hosts = [_host_port(a)[0] for a in addresses]
    if any(_is_wildcard(h) for h in hosts):
        d.add(
            "address",
            "problem",
            f"the node advertises {', '.join(addresses)}: "
            "0.0.0.0 or :: is no address another device can dial",
            'give the address others reach it at: advertise = ["HOST"] under [network] in the '
            "node's config.toml, then restart the node",
        )
    elif all(_is_loopback(h) for h in hosts):
        d.add(
            "address",
            "note",
            f"the node advertises only {', '.join(addresses)}: other devices cannot reach it "
            "(fine when every node runs on this machine)",
            f'listen on the LAN: listen = "0.0.0.0:{_host_port(listen)[1] or 7700}" under [network] in '
            "the node's config.toml (or HEARTHNET_LISTEN), then restart the node",
        )
    else:
        d.add("address", "ok", f"advertises {', '.join(addresses)} (listening on {listen})")


async def _check_port(d: Diagnosis, addresses: Sequence[str], listen: str) -> None:
    """Dial each advertised address from this device: refused or silent here is this device's fault."""
    results: list[dict[str, Any]] = []
    for address in addresses:
        host, port = _host_port(address)
        if _is_wildcard(host) or not port:
            continue
        out = await dial(address)
        results.append(out)
        if out["reason"] == "refused":
            d.add(
                "port",
                "problem",
                f"nothing listens on {address} (the node listens on {listen})",
                'listen where you advertise: listen = "0.0.0.0:PORT" under [network] in the node\'s '
                "config.toml (or HEARTHNET_LISTEN), then restart the node",
            )
        elif out["reason"] == "timeout":
            d.add(
                "port",
                "problem",
                f"port {port} is blocked: {address} does not answer even from this device "
                "(a firewall on this device drops it)",
                firewall_hint(port),
            )
        elif out["reason"] != "ok":
            d.add(
                "port",
                "problem",
                f"{address} cannot be dialled from this device: {out['message']} "
                "(is that still this device's address?)",
            )
    if results and all(r["reachable"] for r in results):
        d.add("port", "ok", f"listening: {', '.join(r['address'] for r in results)} answer on this device")
    d.facts["port"] = results


async def _check_reach(
    d: Diagnosis, client: AsyncClient, addresses: Sequence[str], peers: Sequence[Mapping[str, Any]]
) -> None:
    """Ask every connected peer to dial us back at every address we advertise."""
    d.facts["peers"] = [
        {k: p.get(k) for k in ("node_id", "name", "level", "address", "link_address")} for p in peers
    ]
    dialable = [a for a in addresses if not _is_wildcard(_host_port(a)[0])]
    if not peers or not dialable:
        if dialable:
            d.add("reach", "note", "no peer is connected to tell whether other devices reach this node")
        d.facts["reach"] = []
        return
    reach: list[dict[str, Any]] = []
    # as many at once as a peer serves (node.dial_back's max_concurrent), 8 peers at a time
    limiter = anyio.CapacityLimiter(8)
    per_peer = {p["node_id"]: anyio.CapacityLimiter(DIAL_BACKS_PER_PEER) for p in peers}

    async def probe(peer: Mapping[str, Any], address: str) -> None:
        async with limiter, per_peer[peer["node_id"]]:
            entry = {"peer": peer["node_id"], "peer_name": peer.get("name") or "", "address": address}
            try:
                entry.update(
                    await NodeClient(client).dial_back(
                        address, provider=peer["node_id"], timeout=CALL_SECONDS
                    )
                )
            except NotFound:
                entry.update(reachable=None, reason="unsupported", message="this peer cannot dial back")
            except BusError as exc:
                entry.update(reachable=None, reason="error", message=f"{exc.code}: {exc.message}")
            reach.append(entry)

    async with anyio.create_task_group() as tg:
        for peer in peers:
            for address in dialable:
                tg.start_soon(probe, peer, address)
    judge_reach(d, dialable, reach)


def judge_reach(d: Diagnosis, addresses: Sequence[str], reach: Sequence[Mapping[str, Any]]) -> None:
    """Findings from the peers' dial-backs: an address no peer reaches blocks only when no other
    advertised address is reached either (one on an interface the peers have no route to, a
    container bridge say, is a note while another works)."""
    d.facts["reach"] = list(reach)
    reached_somewhere = any(r.get("reachable") for r in reach)
    for address in addresses:
        tried = [r for r in reach if r["address"] == address and r.get("reachable") is not None]
        good = [r["peer_name"] or r["peer"][:16] for r in tried if r["reachable"]]
        bad = [r for r in tried if not r["reachable"]]
        if not tried:
            d.add("reach", "note", f"no peer could test {address} (they run an older version)")
        elif not bad:
            d.add("reach", "ok", f"{address} is reached by {', '.join(good)}")
        else:
            why = "; ".join(f"{r['peer_name'] or r['peer'][:16]}: {r.get('message', '')}" for r in bad)
            port = _host_port(address)[1]
            reached = f" (reached by {', '.join(good)})" if good else ""
            d.add(
                "reach",
                "note" if reached_somewhere else "problem",
                f"peers cannot connect to {address}{reached}: {why}",
                firewall_hint(port) if any(r.get("reason") == "timeout" for r in bad) else "",
            )


def _check_members(d: Diagnosis, status: Mapping[str, Any]) -> None:
    peers, offline = status.get("peers", []), status.get("offline", [])
    for p in peers:
        d.add(
            "peers",
            "ok",
            f"{p.get('name') or p['node_id'][:16]} ({p.get('level') or '?'}) connected, "
            f"reached on {p.get('address') or p.get('link_address')}",
        )
    for p in offline:
        d.add("peers", "note", f"{p.get('name') or p['node_id'][:16]} ({p.get('level')}) is {seen_text(p)}")
    d.facts["offline"] = list(offline)
    if offline and not peers and status.get("community_id") is not None:
        d.add(
            "peers",
            "problem",
            f"none of the community's {len(offline)} other member(s) is connected",
            "check that they run and that this device and theirs share a network; "
            "run 'hearthnet doctor' on one of them too",
        )


async def _check_replicas(d: Diagnosis, client: AsyncClient, status: Mapping[str, Any]) -> None:
    """A note for each corpus of the community with no replica online: while its host is off,
    nobody can search it."""
    try:
        known = await RagClient(client).known_corpora()
    except BusError:
        return  # no catalog here (RAG off): the corpora are another node's to judge
    judge_replicas(d, known, archives=_archives(status))


def _archives(status: Mapping[str, Any]) -> set[str]:
    """The corpora that are archives (read-only ChromaDB collections: never replicated)."""
    return {
        str((c.get("params") or {}).get("corpus"))
        for c in status.get("capabilities", [])
        if (c.get("params") or {}).get("read_only") is True
    }


def judge_replicas(d: Diagnosis, known: Sequence[Mapping[str, Any]], *, archives: set[str]) -> None:
    copies: list[dict[str, Any]] = []
    for corpus in known:
        name = str(corpus.get("name"))
        if name in (PERSONAL, SYSTEM) or name in archives:
            continue
        hosts = [h for h in corpus.get("hosts", []) if h.get("role") != "replica" and h.get("hosting")]
        replicas = [h for h in corpus.get("hosts", []) if h.get("role") == "replica"]
        online = [h for h in replicas if h.get("online")]
        copies.append({"corpus": name, "replicas": len(replicas), "online": len(online)})
        if not hosts:
            continue
        host = hosts[0].get("node_name") or str(hosts[0].get("node"))[:16]
        if online:
            d.add("replicas", "ok", f"corpus {name}: {len(online)} replica(s) online beside its host {host}")
            continue
        why = "its replicas are offline" if replicas else "it has no replica"
        d.add(
            "replicas",
            "note",
            f"corpus {name} is answerable only while its host {host} is on: {why}",
            f"on another trusted device that is usually on: 'hearthnet corpus replicate {name}'",
        )
    d.facts["replicas"] = copies


async def _check_clock(d: Diagnosis, client: AsyncClient, peers: Sequence[Mapping[str, Any]]) -> None:
    clocks: list[dict[str, Any]] = []

    async def ping(peer: Mapping[str, Any]) -> None:
        sent = time.time()
        try:
            out = await NodeClient(client).ping(provider=peer["node_id"], timeout=10)
        except BusError:
            return
        back = time.time()
        their = out.get("time_ms")
        if isinstance(their, int | float):
            skew = their / 1000 - (sent + back) / 2
            clocks.append({"peer": peer["node_id"], "peer_name": peer.get("name") or "", "skew_s": skew})

    async with anyio.create_task_group() as tg:
        for peer in peers:
            tg.start_soon(ping, peer)
    judge_clocks(d, clocks)


def judge_clocks(d: Diagnosis, clocks: Sequence[Mapping[str, Any]]) -> None:
    """Findings for each peer's clock offset ``skew_s`` (positive: the peer is ahead)."""
    d.facts["clock"] = [{**c, "skew_s": round(c["skew_s"], 3)} for c in clocks]
    for c in clocks:
        who, skew = c["peer_name"] or c["peer"][:16], c["skew_s"]
        ahead = "ahead of" if skew > 0 else "behind"
        if abs(skew) > CLOCK_PROBLEM_SECONDS:
            d.add(
                "clock",
                "problem",
                f"{who}'s clock is {abs(skew):.0f} s {ahead} this one: signed capability lists "
                f"(valid {CLOCK_PROBLEM_SECONDS:.0f} s) expire before they arrive",
                "turn on automatic time (NTP) on both devices",
            )
        elif abs(skew) > CLOCK_NOTE_SECONDS:
            d.add("clock", "note", f"{who}'s clock is {abs(skew):.0f} s {ahead} this one", "turn on NTP")
    if clocks and all(abs(c["skew_s"]) <= CLOCK_NOTE_SECONDS for c in clocks):
        d.add("clock", "ok", f"clocks agree with {len(clocks)} peer(s) within {CLOCK_NOTE_SECONDS:g} s")


def _check_discovery(d: Diagnosis, status: Mapping[str, Any]) -> None:
    """LAN discovery as the node reports it: ``status.discovery`` ``{enabled, working, error,
    found: {node id: addresses}}``, when its version has it."""
    disc = status.get("discovery")
    d.facts["discovery"] = disc
    if not isinstance(disc, Mapping):
        d.add(
            "discovery",
            "note",
            "this node has no LAN discovery: it finds peers from the invite token's addresses "
            "and the addresses members pass on",
        )
        return
    found = disc.get("found")
    count = len(found) if isinstance(found, Mapping | list) else found
    if not disc.get("enabled", True):
        d.add("discovery", "note", "LAN discovery is off ([network] discovery = false)")
    elif disc.get("error") or disc.get("working") is False:
        why = disc.get("error") or "no answer from the LAN yet"
        d.add(
            "discovery",
            "note",
            f"LAN discovery does not work: {why}",
            "mDNS (UDP port 5353) must pass between the devices; members still meet through "
            "the addresses in tokens and in the signed address records",
        )
    else:
        seen = f" ({count} member(s) found on the LAN)" if isinstance(count, int) else ""
        d.add("discovery", "ok", f"LAN discovery works{seen}")


def _check_ui(d: Diagnosis, config: Any, *, running: bool) -> None:
    from hearthnet.frontends.http.server import read_ui_state, ui_url

    if not config.ui.enabled:
        d.add("ui", "note", "the web UI and gateway are off ([ui] enabled = false)")
        d.facts["ui"] = None
        return
    state = read_ui_state(config.ui_state_path) if running else None
    url = state.get("url") if isinstance(state, dict) and isinstance(state.get("url"), str) else None
    shown = url or ui_url(config.ui.listen_host, config.ui.listen_port)
    d.facts["ui"] = {"url": shown, "gateway": f"{shown}/v1", "mcp": f"{shown}/mcp", "running": bool(url)}
    where = "" if url else " (when the node runs)"
    d.add("ui", "ok", f"web UI {shown}/, OpenAI-compatible gateway {shown}/v1, MCP {shown}/mcp{where}")
    if _is_loopback(_host_port(shown.removeprefix("http://"))[0]):
        d.add(
            "ui",
            "note",
            "only this device can open the web UI",
            f'to open it from others: [ui] listen = "0.0.0.0:{config.ui.listen_port}" in config.toml',
        )


def _check_models(
    d: Diagnosis, status: Mapping[str, Any], rag: bool, model: str, names: Mapping[str, str]
) -> None:
    caps = status.get("capabilities", [])

    def where(c: Mapping[str, Any]) -> str:
        return "this node" if c.get("local") else names.get(str(c.get("node")), str(c.get("node"))[:16])

    embedders = [c for c in caps if str(c.get("capability", "")).startswith("embed.text@")]
    fitting = sorted(
        (c for c in embedders if c.get("params", {}).get("model") == model), key=lambda c: not c.get("local")
    )
    d.facts["embedder"] = {"model": model, "providers": [where(c) for c in fitting]}
    if fitting:
        d.add("embedder", "ok", f"embeds with {model} on {where(fitting[0])}")
    elif rag:
        others = sorted({str(c.get("params", {}).get("model")) for c in embedders})
        d.add(
            "embedder",
            "problem",
            f"no node in reach embeds with {model}: this node can neither add documents nor search "
            "its corpora" + (f" (models in reach: {', '.join(others)})" if others else ""),
            "turn [embedding] on here, or connect a node that has the model",
        )
    else:
        d.add("embedder", "note", "this node keeps no documents ([rag] off): the corpus hosts embed")
    chats = [c for c in caps if str(c.get("capability", "")).startswith("llm.chat@")]
    d.facts["llm"] = [{"model": c.get("params", {}).get("model"), "node": where(c)} for c in chats]
    if chats:
        first = sorted(chats, key=lambda c: not c.get("local"))[0]
        d.add("llm", "ok", f"answers are written by {first.get('params', {}).get('model')} on {where(first)}")
    else:
        d.add(
            "llm",
            "note",
            "no chat model in reach: 'ask' answers with passages quoted from the documents",
            "add an [[llm.openai]] server to config.toml, or run 'make local-llm'",
        )
