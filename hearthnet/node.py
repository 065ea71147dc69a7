"""Composition root: config -> identity, stores, bus, peers, services, front doors.

``Node`` owns no protocol logic: it builds the parts, wires their callbacks,
and runs them in one task group until cancelled.  Which services a node runs is
decided here from its config (:func:`default_service_factories`); what sits above
the services (the answer composer, the front doors) is given to it by whoever runs
the node (``hearthnet node run``), as more factories.  Each factory builds one from
the node's parts, asking for what it needs by name, or returns ``None`` when the
config turns it off.  Services never import each other.
"""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
import structlog

from hearthnet import __version__
from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.liveness import Liveness
from hearthnet.bus.peers import PeerManager
from hearthnet.community.levels import Level
from hearthnet.community.membership import Membership, Revocation
from hearthnet.config import NodeConfig, shown_name
from hearthnet.contracts import routing
from hearthnet.contracts.events import community_rules
from hearthnet.contracts.rag import KEPT_LOCAL
from hearthnet.errors import BadRequest, BusError, Revoked, Unauthorized
from hearthnet.events.log import EventLog
from hearthnet.events.rules import EventRules
from hearthnet.identity import Identity, load_identity
from hearthnet.runtime.observability import process_figures
from hearthnet.services.base import Service
from hearthnet.services.community.addresses import AddressKeeper
from hearthnet.services.community.service import CommunityService
from hearthnet.services.node.service import NodeService

if TYPE_CHECKING:
    from hearthnet.blobs import BlobStore

log = structlog.get_logger("hearthnet.node")


class FrontDoor(Protocol):
    """A server the node runs in its task group (the control socket, the web UI): ``run`` reports
    started once it accepts.  The doors are given to :class:`Node` from above (``hearthnet node
    run``): the node knows none of them."""

    name: str

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...


ServiceFactory = Callable[["NodeParts"], Service | None]
FrontDoorFactory = Callable[["NodeParts"], FrontDoor | None]


@dataclass
class NodeParts:
    """What a factory may use to build its service or front door, each asked for by name."""

    config: NodeConfig
    identity: Identity
    bus: CapabilityBus
    event_log: EventLog[Membership]
    rules: EventRules[Membership]
    community: CommunityService
    corpus_listeners: list[Callable[[str], None]] = field(default_factory=list)
    """Told a corpus name whenever this node's RAG service changes that corpus's documents."""
    _blob_store: BlobStore | None = None

    @property
    def blob_store(self) -> BlobStore:
        """The node's blob store, opened by whichever factory asks for it first (file, rag, ocr)."""
        if self._blob_store is None:
            from hearthnet.blobs import BlobStore

            self._blob_store = BlobStore(self.config.blobs_dir, cap_bytes=self.config.blobs.cap_bytes)
        return self._blob_store

    def corpus_changed(self, corpus: str) -> None:
        """Tell every listener (e.g. the answer cache) that a corpus's documents changed."""
        for listener in self.corpus_listeners:
            listener(corpus)


def read_bootstrap(config: NodeConfig) -> list[dict[str, Any]]:
    if not config.bootstrap_path.exists():
        return []
    try:
        data = json.loads(config.bootstrap_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadRequest(f"{config.bootstrap_path} is unreadable: {exc}") from exc
    peers = data.get("peers", []) if isinstance(data, dict) else []
    return [p for p in peers if isinstance(p, dict)]


# -- the services a node runs ---------------------------------------------------------------
def file_service(parts: NodeParts) -> Service | None:
    from hearthnet.services.file.service import FileService

    return FileService(bus=parts.bus, store=parts.blob_store)


def embedding_service(parts: NodeParts) -> Service | None:
    if not parts.config.embedding.enabled:
        return None
    from hearthnet.services.embedding.service import EmbeddingService

    return EmbeddingService(parts.config.embedding)


def rag_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.rag
    if not cfg.enabled:
        return None
    from hearthnet.services.rag.catalog import effective_ingest
    from hearthnet.services.rag.replicas.log import corpus_view
    from hearthnet.services.rag.service import RagService, RagSettings
    from hearthnet.services.rag.store import CorpusStore

    community, event_log, own_id = parts.community, parts.event_log, parts.identity.node_id

    async def append_event(event_type: str, data: dict[str, Any]) -> str:
        return (await community.append(event_type, data)).event_id

    async def append_events(event_type: str, items: list[dict[str, Any]]) -> list[str]:
        return [e.event_id for e in await community.append_many(event_type, items)]

    def find_event(corpus: str, doc_cid: str) -> str | None:
        # in effect: not cancelled by a later delete (a document deleted, then ingested again,
        # must be announced again)
        return effective_ingest(event_log, corpus, doc_cid, own_id)

    service = RagService(
        bus=parts.bus,
        store=CorpusStore(parts.config.rag_dir, server_url=cfg.chroma_url),
        blobs=parts.blob_store,
        settings=RagSettings(
            embedding_model=cfg.embedding_model,
            query_timeout_seconds=cfg.query_timeout_seconds,
            query_max_concurrent=cfg.query_max_concurrent,
            ingest_max_concurrent=cfg.ingest_max_concurrent,
            embed_timeout_seconds=cfg.embed_timeout_seconds,
            accept_new_corpora=cfg.accept_new_corpora,
            replicas=cfg.replicas,
            max_replicas=cfg.max_replicas,
        ),
        append_event=append_event,
        append_events=append_events,
        find_event=find_event,
        own_level=lambda: event_log.view(lambda m: m.level_of(own_id)),
        corpus_changed=parts.corpus_changed,
        archives=cfg.archives,
        corpus_view=lambda corpus: corpus_view(event_log, corpus),
    )
    community.on_events(lambda _events: service.events_stored())  # replicas follow the log

    async def peer_up(_peer: str) -> None:
        service.events_stored()  # a node that can serve a copy may be back

    parts.bus.on_peer_up(peer_up)
    return service


def folder_service(parts: NodeParts) -> Service | None:
    """``rag.watch``: folders this node keeps indexed, into corpora wherever they are hosted."""
    from hearthnet.services.rag.folders.service import FolderService
    from hearthnet.services.rag.folders.watcher import WatchSettings

    own_id = parts.identity.node_id
    service = FolderService(
        bus=parts.bus,
        node_id=own_id,
        state_path=parts.config.home / "folders.sqlite",
        configured=parts.config.rag.folders,
        own_level=lambda: parts.event_log.view(lambda m: m.level_of(own_id)),
        settings=WatchSettings(settle_seconds=parts.config.rag.folder_settle_seconds),
    )
    parts.community.on_events(lambda _events: service.membership_changed())
    return service


def rag_catalog_service(parts: NodeParts) -> Service | None:
    """``rag.known_corpora`` on every node, RAG or not: the corpora of offline hosts are listed anywhere."""
    from hearthnet.services.rag.catalog import RagCatalog

    return RagCatalog(bus=parts.bus, event_log=parts.event_log)


def archive_tool_service(parts: NodeParts) -> Service | None:
    """``rag.search_archives`` for this node's front doors (MCP, the gateway, the composer)."""
    from hearthnet.services.rag.archives.service import ArchiveToolService

    cfg = parts.config.rag
    return ArchiveToolService(
        bus=parts.bus,
        archives=cfg.archives,
        allowed_urls=sorted(cfg.allowed_archive_urls),
        defaults=cfg.archive_defaults,
        query_timeout=cfg.query_timeout_seconds,
        embed_timeout=cfg.embed_timeout_seconds,
    )


def ocr_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.ocr
    if not cfg.enabled:
        return None
    from hearthnet.services.ocr.service import OcrService, OcrSettings

    return OcrService(
        bus=parts.bus,
        blobs=parts.blob_store,
        settings=OcrSettings(max_concurrent=cfg.max_concurrent, dpi=cfg.dpi),
    )


def llm_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.llm
    if not cfg.enabled or (not cfg.openai and cfg.local is None):
        return None
    from hearthnet.services.llm.service import LlmConfig, LlmService

    local = None
    if cfg.local is not None:  # the config's [llm.local] as it is, its child's log in the home
        local = replace(cfg.local, log_path=parts.config.home / "logs" / "llm-local.log")
    return LlmService(LlmConfig(openai=cfg.openai, local=local))  # [[llm.openai]] as it is


def rerank_service(parts: NodeParts) -> Service | None:
    """``rerank.text`` for each ``[[rerank.servers]]`` table: only when one is configured."""
    cfg = parts.config.rerank
    if not cfg.enabled or not cfg.servers:
        return None
    from hearthnet.services.rerank.service import RerankService

    return RerankService(cfg.servers)


def default_service_factories() -> list[ServiceFactory]:
    """The services a node runs beside ``node.*`` and the community's, each if its config allows."""
    return [
        file_service,
        embedding_service,
        rag_catalog_service,
        rag_service,
        archive_tool_service,
        ocr_service,
        llm_service,
        rerank_service,
        folder_service,
    ]


class Node:
    def __init__(
        self,
        config: NodeConfig,
        *,
        factories: list[ServiceFactory] | None = None,
        front_doors: list[FrontDoorFactory] | None = None,
    ) -> None:
        self.config = config
        self._factories = factories
        self._door_factories = front_doors
        self.identity: Identity | None = None
        self.bus: CapabilityBus | None = None
        self.peers: PeerManager | None = None
        self.event_log: EventLog[Membership] | None = None
        self.community: CommunityService | None = None
        self.addresses: AddressKeeper | None = None
        self.services: list[Service] = []
        self.front_doors: list[FrontDoor] = []
        self.started = anyio.Event()
        self._bootstrap_ids: set[str] = set()
        """The inviter named in our join token: admitted until our log says who the members are."""

    # trust -----------------------------------------------------------------
    def _level_of(self, node_id: str) -> Level | None:
        assert self.event_log is not None
        return self.event_log.view(lambda m: m.level_of(node_id))

    def _own_revocation(self) -> Revocation | None:
        return self.community.own_revocation() if self.community is not None else None

    def _is_member(self, node_id: str) -> bool:
        if self._own_revocation() is not None:
            return False  # a revoked node keeps no links: every member refuses it anyway
        return self._level_of(node_id) is not None

    def _admit(self, node_id: str) -> None:
        assert self.event_log is not None and self.identity is not None
        revocation = self.event_log.view(lambda m: m.revocation(node_id))
        if revocation is not None:
            # It has proven its key: show it the signed revocation, so it learns why.
            raise Revoked(
                f"{node_id} was revoked from this community by {revocation.by}",
                evidence=revocation.event.to_wire(),
            )
        if self.event_log.view(lambda m: m.level_of(node_id)) is not None:
            return
        if self.event_log.membership().founder is None and node_id in self._bootstrap_ids:
            return  # we joined but have not synced yet: trust the inviter named in our token
        raise Unauthorized(f"{node_id} is not a member of this community")

    async def _membership_changed(self) -> None:
        if self.peers is not None:
            await self.peers.disconnect_non_members()
            self.peers.wake()

    async def _peer_refused(self, peer: str, error: BusError) -> None:
        """A peer refused our handshake: if it showed our revocation, learn it and stop dialling."""
        if isinstance(error, Revoked) and error.evidence is not None and self.community is not None:
            if await self.community.learn_revocation(peer, error.evidence):
                await self._membership_changed()

    # status ----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        assert self.identity is not None and self.event_log is not None and self.bus is not None
        community_id = self.event_log.community_id
        revocation = self._own_revocation()
        own = None if community_id is None or revocation else self._level_of(self.identity.node_id)
        return {
            "node_id": self.identity.node_id,
            "name": self.config.name,
            "version": __version__,
            "community_id": community_id,
            "community_name": self.event_log.membership().name if community_id is not None else None,
            "level": own.label if own is not None else None,
            "revoked": _revocation_json(revocation),
            "addresses": self.peers.addresses() if self.peers else [],
            "capabilities": [
                r.descriptor.ref for r in self.bus.registry.local() if not r.descriptor.local_only
            ],
        }

    def stats(self) -> dict[str, Any]:
        assert self.bus is not None and self.community is not None
        return {
            "capabilities": self.bus.stats.snapshot(),
            "peers": len(self.bus.sessions),
            "peer_faults": self.bus.peer_faults(),
            "events": self.community.health(),
            "services": {s.name: s.health() for s in self.services},
            "process": process_figures(),
        }

    def status(self) -> dict[str, Any]:
        assert self.bus is not None
        peers = []
        now = time.monotonic()
        for node_id, session in sorted(self.bus.sessions.items()):
            level = self._level_of(node_id)
            manifest = self.bus.registry.remote_nodes().get(node_id)
            peers.append(
                {
                    "node_id": node_id,
                    "name": shown_name(manifest.name) if manifest else "",
                    "level": level.label if level else None,
                    "address": listen_address(
                        session.link.remote_address, manifest.addresses if manifest else ()
                    ),
                    "link_address": session.link.remote_address,
                    # Seconds since anything arrived on the link (closed as dead past dead_after_seconds).
                    "last_heard_s": round(now - session.link.last_received, 1),
                }
            )
        caps = [
            {
                "capability": p.descriptor.ref,
                "params": dict(p.descriptor.params),
                "node": p.node_id,
                "local": p.is_local,
            }
            for p in self.bus.registry.all_capabilities()
        ]
        discovery = self.addresses.state() if self.addresses is not None else None
        return {
            **self.info(),
            "peers": peers,
            "offline": self._offline_members(),
            "capabilities": caps,
            "discovery": discovery,
        }

    def _advertised_by(self, node_id: str) -> tuple[str, ...]:
        """The addresses in ``node_id``'s current signed manifest (this node's own for itself)."""
        assert self.bus is not None
        if self.identity is not None and node_id == self.identity.node_id:
            return tuple(self.peers.addresses() if self.peers else ())
        manifest = self.bus.registry.remote_nodes().get(node_id)
        return manifest.addresses if manifest else ()

    def _offline_members(self) -> list[dict[str, Any]]:
        """Members with no link now: the name they last gave and when their link went down
        (``last_seen`` wall-clock seconds; ``None`` if this node never saw them connected)."""
        assert self.bus is not None and self.event_log is not None and self.identity is not None
        if self.event_log.community_id is None:
            return []  # no community yet: no members to miss
        members = self.event_log.view(lambda m: m.members())
        out = []
        for node_id, member in sorted(members.items()):
            if node_id == self.identity.node_id or node_id in self.bus.sessions:
                continue
            seen = self.bus.sightings.get(node_id)
            out.append(
                {
                    "node_id": node_id,
                    "name": shown_name(seen.name) if seen else "",
                    "level": member.level.label,
                    "last_seen": seen.last_seen if seen else None,
                }
            )
        return out

    # running ---------------------------------------------------------------------
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        self.identity = identity = load_identity(config.identity_path)
        rules = community_rules()
        self.event_log = event_log = await anyio.to_thread.run_sync(
            lambda: EventLog(config.events_path, rules=rules)
        )
        self.bus = bus = CapabilityBus(
            identity,
            level_of=self._level_of,
            community_id=lambda: event_log.community_id,
            name=config.name,
            addresses=lambda: self.peers.addresses() if self.peers else [],
            liveness=Liveness(config.network.keepalive_seconds, config.network.dead_after_seconds),
        )
        routing.install(bus)  # how remote providers' params fit, per capability family
        for capability, params in KEPT_LOCAL:  # the personal corpus never leaves this node
            bus.keep_local(capability, params)
        self.peers = peers = self._peer_manager(bus, identity, event_log)
        self.community = community = CommunityService(
            identity=identity,
            bus=bus,
            event_log=event_log,
            addresses=peers.addresses,
            on_membership_changed=self._membership_changed,
            revocation_path=config.revocation_path,
        )
        self.addresses = AddressKeeper(
            node_id=identity.node_id,
            community=community,
            event_log=event_log,
            peers=peers,
            discovery=config.network.discovery,
        )
        node_service = NodeService(
            info=self.info, stats=self.stats, status=self.status, advertised=self._advertised_by
        )
        self._build_services_and_doors(
            NodeParts(config, identity, bus, event_log, rules, community), [node_service, community]
        )
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await tg.start(peers.run)
                except OSError as exc:
                    raise _listen_error(config, exc) from exc
                for service in self.services:
                    await service.start()
                    for registration in service.registrations():
                        bus.register(registration)
                    background = getattr(service, "run_background", None)
                    if background is not None:  # e.g. the RAG service's replica follower
                        tg.start_soon(background)
                tg.start_soon(bus.run_announcer)
                tg.start_soon(community.run)
                tg.start_soon(self.addresses.run)  # this node's addresses: record, LAN, renumbering
                for door in self.front_doors:  # the control socket, the web UI
                    await tg.start(door.run)
                log.info(
                    "node_started",
                    node_id=identity.node_id,
                    port=peers.bound_port,
                    services=[s.name for s in self.services],
                )
                self.started.set()
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop_services()
                await anyio.to_thread.run_sync(event_log.close)
                log.info("node_stopped", node_id=identity.node_id)

    def _peer_manager(
        self, bus: CapabilityBus, identity: Identity, event_log: EventLog[Membership]
    ) -> PeerManager:
        """The peers' door: listening, dialing and admitting, with the bootstrap peers noted."""
        config, network = self.config, self.config.network
        peers = PeerManager(
            bus,
            identity,
            community_id=lambda: event_log.community_id,
            admit=self._admit,
            is_member=self._is_member,
            on_refused=self._peer_refused,
            may_dial=lambda: self._own_revocation() is None,
            listen_host=network.listen_host,
            listen_port=network.listen_port,
            advertise=network.advertise,
            max_frame=network.max_frame,
            handshake_timeout=network.handshake_timeout,
            state_path=config.home / "peers.json",
        )
        for peer in read_bootstrap(config):
            node_id = peer.get("node_id")
            if isinstance(node_id, str):
                self._bootstrap_ids.add(node_id)
                for address in peer.get("addresses", []):
                    peers.add_bootstrap(node_id, str(address))
        return peers

    def _build_services_and_doors(self, parts: NodeParts, built_in: list[Service]) -> None:
        """The services (``built_in`` first, then each factory's) and the front doors, in start order."""
        factories = self._factories if self._factories is not None else default_service_factories()
        self.services = [*built_in, *(s for s in (make(parts) for make in factories) if s is not None)]
        doors = self._door_factories or []
        self.front_doors = [d for d in (make(parts) for make in doors) if d is not None]

    async def _stop_services(self) -> None:
        """Stop every service, the last started first; one that fails to stop does not stop the rest."""
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("service_stop_failed", service=service.name)


def _listen_error(config: NodeConfig, exc: OSError) -> BadRequest:
    """Binding the listen address failed: name the address, and where to change it."""
    net = config.network
    host = f"[{net.listen_host}]" if ":" in net.listen_host else net.listen_host
    reason = (exc.strerror or str(exc)).lower()
    if exc.errno == errno.EADDRINUSE:
        reason += " by another program or node: stop it, or choose another address"
    else:
        reason += ": choose another address"
    return BadRequest(
        f"cannot listen on {host}:{net.listen_port}: {reason} with [network] listen in "
        f"{config.home / 'config.toml'} or HEARTHNET_LISTEN "
        "(a new home takes 'hearthnet init --listen HOST:PORT')"
    )


def listen_address(link: str, advertised: Sequence[str]) -> str:
    """Where a peer listens, for ``status``: the link's own address if the peer advertises it (we
    dialled it), else an advertised address on the link's host, else the first advertised one; the
    link's address (an inbound peer's source port) only when the peer advertised none."""
    if not advertised or link in advertised:
        return link
    host = link.rpartition(":")[0]
    return next((a for a in advertised if a.rpartition(":")[0] == host), advertised[0])


def _revocation_json(revocation: Revocation | None) -> dict[str, Any] | None:
    """``status``'s ``revoked``: by whom, when (UTC, and ms since the epoch), why, which event."""
    if revocation is None:
        return None
    at = datetime.fromtimestamp(revocation.at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "by": revocation.by,
        "at": at,
        "at_ms": revocation.at_ms,
        "reason": revocation.reason,
        "event_id": revocation.event.event_id,
    }
