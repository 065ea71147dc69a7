"""A local mesh of real node processes on 127.0.0.1, driven through the CLI.

Used by the demo, the integration tests and the benchmarks: every node is a
separate ``hearthnet node run`` process with its own home, and the community
is formed with exactly the commands a user types (init, community create,
invite, join).  Waiting is always on a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class MeshError(RuntimeError):
    """A mesh step failed; the message carries the CLI's stderr."""


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the condition may fail while a node starts
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise MeshError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


@dataclass
class MeshNode:
    name: str
    home: Path
    env: dict[str, str]
    node_id: str = ""
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    # CLI ----------------------------------------------------------------------
    def command(self, *args: str) -> list[str]:
        """The argv of ``hearthnet --home HOME ARGS`` (a LAN device runs it in its namespace)."""
        return [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(self.home), *args]

    def cli(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            env={**self.env, **self.extra_env},
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise MeshError(f"{self.name}: hearthnet {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def cli_json(self, *args: str, timeout: float = 120.0) -> Any:
        proc = self.cli(*args, "--json", timeout=timeout)
        return json.loads(proc.stdout)

    # process ------------------------------------------------------------------
    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.log_path = self.home / "node.log"
        with open(self.log_path, "ab") as log:  # the child holds its own copy of the descriptor
            self.process = subprocess.Popen(
                self.command("node", "run"),
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**self.env, **self.extra_env},
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            if self.process is not None and self.process.poll() is not None:
                raise MeshError(f"{self.name} exited with {self.process.returncode}: {self.log_tail()}")
            if not (self.home / "control.sock").exists():
                return None
            status: dict[str, Any] = self.cli_json("status", timeout=10)
            return status

        return wait_for(ready, timeout=timeout, what=f"{self.name} to start")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=5)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.cli_json("status", timeout=10)
        return result

    def peer_ids(self) -> set[str]:
        return {p["node_id"] for p in self.status()["peers"]}


class LocalMesh:
    """Several nodes in one temporary directory; ``close()`` stops them all."""

    def __init__(self, root: Path, *, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.nodes: dict[str, MeshNode] = {}
        base = dict(os.environ if env is None else env)
        base.pop("HEARTHNET_HOME", None)
        base.setdefault("HEARTHNET_LOG_LEVEL", "info")
        self.env = base

    def add(self, name: str, *, env: Mapping[str, str] | None = None) -> MeshNode:
        home = self.root / name
        node = MeshNode(name, home, self.env, extra_env=dict(env or {}))
        node.node_id = node.cli_json("init", "--name", name, "--listen", "127.0.0.1:0")["node_id"]
        self.nodes[name] = node
        return node

    def found(self, founder: MeshNode, community: str = "home") -> dict[str, Any]:
        result: dict[str, Any] = founder.cli_json("community", "create", community)
        founder.start()
        founder.wait_ready()
        return result

    def invite(
        self, inviter: MeshNode, invitee: MeshNode, level: str = "member", *, start: bool = True
    ) -> None:
        token = inviter.cli_json("invite", invitee.node_id, "--level", level)["token"]
        invitee.cli("join", token)
        if start:
            invitee.start()
            invitee.wait_ready()

    def wait_full_mesh(self, nodes: Sequence[MeshNode] | None = None, timeout: float = 60.0) -> None:
        members = list(nodes or self.nodes.values())
        for node in members:
            others = {n.node_id for n in members if n is not node}
            wait_for(
                lambda node=node, others=others: others <= node.peer_ids(),  # type: ignore[misc]
                timeout=timeout,
                what=f"{node.name} to see {len(others)} peers",
            )

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> LocalMesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@asynccontextmanager
async def member_bus(node: MeshNode, identity_home: Path) -> AsyncIterator[Any]:
    """This process joins ``node``'s community as the member whose home is ``identity_home``.

    Yields a real :class:`CapabilityBus` with one authenticated TCP link to
    ``node``; used by tests and benchmarks that drive the wire directly.
    """
    import anyio

    from hearthnet.bus.bus import CapabilityBus
    from hearthnet.community.levels import Level
    from hearthnet.identity import load_identity
    from hearthnet.transport import open_link

    identity = load_identity(identity_home / "identity.key")
    status = node.status()
    host, _, port = status["addresses"][0].rpartition(":")
    levels = {node.node_id: Level.ANCHOR}
    bus = CapabilityBus(identity, level_of=levels.get, community_id=lambda: status["community_id"])
    link = await open_link(
        host, int(port), identity=identity, community_id=status["community_id"], admit=lambda _: None
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(bus.attach, link)
        with anyio.fail_after(10):
            await bus.wait_peer(node.node_id)
        try:
            yield bus
        finally:
            tg.cancel_scope.cancel()
