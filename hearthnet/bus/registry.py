"""Local registrations and remote entries learned from manifests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.api import ProviderInfo
from hearthnet.bus.descriptors import (
    CapabilityDescriptor,
    ParamsPredicate,
    Registration,
    Version,
    shared_keys_equal,
    version_satisfies,
)
from hearthnet.bus.manifest import Manifest

REMEMBERED = 256
"""Entries a lookup cache holds before it starts afresh (names and params come from peers too)."""


def remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``value`` under ``key`` in a lookup cache of at most :data:`REMEMBERED` entries."""
    if len(cache) >= REMEMBERED:
        cache.clear()
    cache[key] = value


def lookup_key(
    capability: str, version: Version, params: Mapping[str, Any], extra: Any
) -> tuple[Any, ...] | None:
    """A key for caching a lookup of these arguments, or ``None`` (not cached).

    Only params whose values are all text: two such params are equal exactly when
    their items are, so a predicate cannot tell apart what the key holds together.
    """
    items = tuple(params.items())
    for _, value in items:
        if type(value) is not str:
            return None
    return capability, version, extra, items


@dataclass
class RemoteNode:
    manifest: Manifest


class Registry:
    """What this node offers and what its connected peers offer."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._local: list[Registration] = []
        self._remote: dict[str, RemoteNode] = {}
        # name -> [(node_id, that node's descriptors of the name in manifest order)], in the
        # order of `_remote`; rebuilt when a manifest comes or goes (every call looks here)
        self._remote_by_name: dict[str, list[tuple[str, list[CapabilityDescriptor]]]] = {}
        self.changed = 0  # bumped on every local change, to re-announce
        self.version = 0
        """Bumped on every change, local or remote: a lookup cached at one version holds until the next."""
        self._predicates: dict[str, ParamsPredicate] = {}
        """How a remote provider's params fit a call, by capability (default: every key equal)."""

    def use_predicate(self, name: str, predicate: ParamsPredicate) -> None:
        """Match remote providers of ``name`` with ``predicate`` (a local one brings its own)."""
        self._predicates[name] = predicate
        self.version += 1

    # local -----------------------------------------------------------------
    def add_local(self, registration: Registration) -> None:
        d = registration.descriptor
        self._local = [
            r
            for r in self._local
            if not (r.descriptor.name == d.name and dict(r.descriptor.params) == dict(d.params))
        ]
        self._local.append(registration)
        self.changed += 1
        self.version += 1

    def remove_local(self, name: str, params: Mapping[str, Any]) -> None:
        self._local = [
            r
            for r in self._local
            if not (r.descriptor.name == name and dict(r.descriptor.params) == dict(params))
        ]
        self.changed += 1
        self.version += 1

    def local(self) -> list[Registration]:
        return list(self._local)

    def find_local(
        self, name: str, version: Version, params: Mapping[str, Any], *, remote_caller: bool
    ) -> Registration | None:
        for r in self._local:
            d = r.descriptor
            if d.name != name or not version_satisfies(d.version, version):
                continue
            if remote_caller and d.local_only:
                continue
            if r.predicate(d.params, params):
                return r
        return None

    # remote ----------------------------------------------------------------
    def set_remote(self, manifest: Manifest) -> bool:
        """Store a verified manifest; False if it is not newer than the one held."""
        held = self._remote.get(manifest.node_id)
        if held is not None and held.manifest.seq >= manifest.seq:
            return False
        self._remote[manifest.node_id] = RemoteNode(manifest)
        self._index_remote()
        return True

    def drop_remote(self, node_id: str) -> None:
        if self._remote.pop(node_id, None) is not None:
            self._index_remote()

    def expire(self, now_ms: int) -> list[str]:
        gone = [n for n, r in self._remote.items() if r.manifest.expires_at_ms < now_ms]
        for n in gone:
            del self._remote[n]
        if gone:
            self._index_remote()
        return gone

    def _index_remote(self) -> None:
        index: dict[str, list[tuple[str, list[CapabilityDescriptor]]]] = {}
        for node_id, remote in self._remote.items():
            by_name: dict[str, list[CapabilityDescriptor]] = {}
            for d in remote.manifest.capabilities:
                by_name.setdefault(d.name, []).append(d)
            for name, descriptors in by_name.items():
                index.setdefault(name, []).append((node_id, descriptors))
        self._remote_by_name = index
        self.version += 1

    def remote_nodes(self) -> dict[str, Manifest]:
        return {n: r.manifest for n, r in self._remote.items()}

    # lookup ----------------------------------------------------------------
    def providers(self, name: str, version: Version, params: Mapping[str, Any]) -> list[ProviderInfo]:
        out: list[ProviderInfo] = []
        for r in self._local:
            d = r.descriptor
            if d.name == name and version_satisfies(d.version, version) and r.predicate(d.params, params):
                out.append(ProviderInfo(self.node_id, d, True))
        predicate = self._predicates.get(name, shared_keys_equal)
        for node_id, descriptors in self._remote_by_name.get(name, ()):
            for d in descriptors:
                if version_satisfies(d.version, version) and predicate(d.params, params):
                    out.append(ProviderInfo(node_id, d, False))
                    break
        return out

    def offers(self, name: str, version: Version) -> list[ProviderInfo]:
        """Every local and remote descriptor of ``name`` satisfying ``version``, whatever its params."""
        out = [
            ProviderInfo(self.node_id, r.descriptor, True)
            for r in self._local
            if r.descriptor.name == name and version_satisfies(r.descriptor.version, version)
        ]
        for node_id, descriptors in self._remote_by_name.get(name, ()):
            out.extend(
                ProviderInfo(node_id, d, False) for d in descriptors if version_satisfies(d.version, version)
            )
        return out

    def all_capabilities(self) -> list[ProviderInfo]:
        out = [ProviderInfo(self.node_id, r.descriptor, True) for r in self._local]
        for node_id, remote in self._remote.items():
            out.extend(ProviderInfo(node_id, d, False) for d in remote.manifest.capabilities)
        return out
