"""A household LAN on one machine: a Linux bridge and one network namespace per device.

Each device is a namespace with ``lo`` up and one veth pair: the end inside is its
``eth0`` with its own IPv4 (and optionally IPv6) address, the other end is a port of
the bridge, the LAN's switch.  Nothing routes through 127.0.0.1 of the machine: a
node in one namespace reaches another only over the bridge, at the address the other
device has on it.  Node processes and CLI commands run inside their device's namespace
(``ip netns exec``), so a node listening on ``0.0.0.0:7700`` sees only its own LAN address.

The LAN can cut a device's cable (the bridge port goes down: no FIN, no RST, the peers
only notice the silence), renumber it (its address replaced, as after a DHCP renew)
and drop packets to one of its ports inside its namespace (nftables, else iptables).

Needs root and ``ip``; :func:`lan_unavailable` says why not, for a test's skip reason.
Every namespace, link and bridge is named ``hnl<pid>…``, so parallel runs never collide,
and removed when the :class:`LanMesh` closes, also after a failure; one left by a run
that was killed (its pid gone) is removed by the next run's :func:`remove_stale`.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, ip_address
from pathlib import Path

from hearthnet.testing import LocalMesh, MeshError, MeshNode

__all__ = ["PREFIX", "LanDevice", "LanMesh", "lan_unavailable", "remove_stale"]

PREFIX = "hnl"
"""Every namespace, veth and bridge of a LAN is named ``hnl<pid>…`` (pid of the run that made it)."""
_STALE = re.compile(rf"^{PREFIX}(\d+)[a-z-]")
_serial = itertools.count()
"""Distinguishes the LANs (and their links) of one process."""


def _run(*argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise MeshError(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run("ip", *args, check=check)


def lan_unavailable() -> str | None:
    """Why a namespace LAN cannot be built here (``None``: it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and a bridge)"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def firewall_tool() -> str | None:
    """``nft`` or ``iptables`` (what :meth:`LanMesh.block` uses), ``None`` when neither is installed."""
    return next((tool for tool in ("nft", "iptables") if shutil.which(tool)), None)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(netns: str) -> None:
    pids = _ip("netns", "pids", netns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def remove_stale() -> list[str]:
    """Remove the namespaces, links and bridges of LAN runs whose process is gone; returns their names."""
    removed: list[str] = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _STALE.match(name)
        if match and not _pid_alive(int(match.group(1))):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        match = _STALE.match(name)
        if match and not _pid_alive(int(match.group(1))):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass
class LanDevice(MeshNode):
    """A device of the LAN: a :class:`MeshNode` whose node and CLI run inside its namespace."""

    netns: str = ""
    address: str = ""
    """Its IPv4 address on the LAN (changes when renumbered)."""
    address6: str | None = None
    host_link: str = ""
    """The veth end on the bridge: down is the cable pulled (or the lid closed)."""

    def command(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().command(*args)]

    def run(self, *argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Any command inside this device's namespace."""
        return _run("ip", "netns", "exec", self.netns, *argv, check=check, timeout=timeout)


class LanMesh(LocalMesh):
    """Devices on one bridge, each a node in its own namespace; ``close()`` removes everything."""

    def __init__(
        self, root: Path, *, env: Mapping[str, str] | None = None, ipv6: bool = False, stp: bool = False
    ) -> None:
        super().__init__(root, env=env)
        remove_stale()
        pid, serial = os.getpid(), next(_serial)
        self._tag = f"{PREFIX}{pid}"
        self._serial = serial
        self.ipv6 = ipv6
        # A subnet per run, so that the host's connection tracking (bridged packets pass it) never
        # confuses two parallel runs' connections.
        self.subnet = IPv4Network(f"10.{64 + (pid + serial) % 128}.{(pid // 128 + serial) % 256}.0/24")
        self._hosts = iter(list(self.subnet.hosts())[1:])
        self.bridge = f"{self._tag}b{serial}"
        self._links = itertools.count()
        self.devices: dict[str, LanDevice] = {}
        self._namespaces: list[str] = []
        try:
            _ip("link", "add", self.bridge, "type", "bridge", "stp_state", "1" if stp else "0")
            _ip("link", "set", self.bridge, "type", "bridge", "forward_delay", "0")
            _ip("link", "set", self.bridge, "up")
        except Exception:
            self.close()
            raise

    # devices ------------------------------------------------------------------
    def device(self, name: str) -> LanDevice:
        """A new device on the LAN (its namespace, cable and address), with no node yet."""
        index = next(self._links)
        netns = f"{self._tag}-{self._serial}-{name}"
        host_link, inner = f"{self._tag}v{self._serial}x{index}", f"{self._tag}p{self._serial}x{index}"
        address = str(next(self._hosts))
        self._namespaces.append(netns)
        _ip("netns", "add", netns)
        _ip("link", "add", host_link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", netns)
        _ip("-n", netns, "link", "set", inner, "name", "eth0")
        _ip("link", "set", host_link, "master", self.bridge)
        _ip("link", "set", host_link, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        address6 = None
        if self.ipv6:
            address6 = f"fd68:{self._serial:x}:{os.getpid() & 0xFFFF:x}::{index + 2:x}"
            _ip("-n", netns, "addr", "add", f"{address6}/64", "dev", "eth0", "nodad")
        _ip("-n", netns, "link", "set", "eth0", "up")
        home = self.root / name
        device = LanDevice(
            name,
            home,
            self.env,
            extra_env={"HEARTHNET_HOME": str(home)},
            netns=netns,
            address=address,
            address6=address6,
            host_link=host_link,
        )
        self.devices[name] = device
        return device

    def add(  # type: ignore[override]
        self,
        name: str,
        *,
        listen: str = "0.0.0.0:7700",
        init_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        advertise_own_address: bool = False,
    ) -> LanDevice:
        """A device whose node is set up as a user does: ``hearthnet init --name NAME --listen LISTEN``.

        ``advertise_own_address`` pins ``HEARTHNET_ADVERTISE_HOST`` to the device's LAN address,
        for a node that cannot yet find its own dialable addresses.
        """
        device = self.device(name)
        device.extra_env.update(env or {})
        if advertise_own_address:
            device.extra_env["HEARTHNET_ADVERTISE_HOST"] = device.address
        out = device.cli_json("init", "--name", name, "--listen", listen, *init_args)
        device.node_id = out["node_id"]
        self.nodes[name] = device
        return device

    # what happens to a LAN ----------------------------------------------------
    def link_down(self, device: LanDevice) -> None:
        """Pull the device's cable: its bridge port goes down, nothing is said to anyone (no FIN)."""
        _ip("link", "set", device.host_link, "down")

    def link_up(self, device: LanDevice) -> None:
        """Plug it back in (the address is kept, as after a sleep)."""
        _ip("link", "set", device.host_link, "up")

    def renumber(self, device: LanDevice, address: str | None = None) -> str:
        """Replace the device's IPv4 address (a DHCP renew that changed it); returns the new one."""
        new = address or str(next(self._hosts))
        if ip_address(new) not in self.subnet:
            raise MeshError(f"{new} is not on the LAN {self.subnet}")
        prefix = self.subnet.prefixlen
        # The old one goes first: deleting a primary address also deletes its secondaries.
        _ip("-n", device.netns, "addr", "del", f"{device.address}/{prefix}", "dev", "eth0")
        _ip("-n", device.netns, "addr", "add", f"{new}/{prefix}", "dev", "eth0")
        device.address = new
        return new

    def block(self, device: LanDevice, port: int) -> str:
        """Drop every TCP packet to ``port`` inside the device's namespace; returns the tool used."""
        tool = firewall_tool()
        if tool == "nft":
            device.run("nft", "add", "table", "inet", "hnlan")
            device.run(
                "nft", "add", "chain", "inet", "hnlan", "input", "{ type filter hook input priority 0 ; }"
            )
            device.run("nft", "add", "rule", "inet", "hnlan", "input", "tcp", "dport", str(port), "drop")
        elif tool == "iptables":
            device.run("iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP")
        else:
            raise MeshError("neither nft nor iptables is installed")
        return tool

    def unblock(self, device: LanDevice) -> None:
        """Remove every drop rule :meth:`block` added in the device's namespace."""
        if shutil.which("nft"):
            device.run("nft", "delete", "table", "inet", "hnlan", check=False)
        if shutil.which("iptables"):
            device.run("iptables", "-F", "INPUT", check=False)

    def connects(self, device: LanDevice, host: str, port: int, timeout: float = 3.0) -> bool:
        """Whether a TCP connection from inside ``device`` to ``host:port`` completes."""
        probe = (
            f"import socket,sys\ns=socket.create_connection(({host!r},{port}),timeout={timeout})\ns.close()"
        )
        proc = device.run(sys.executable, "-c", probe, check=False, timeout=timeout + 10)
        return proc.returncode == 0

    # teardown -----------------------------------------------------------------
    def close(self) -> None:
        """Stop every node, then remove every namespace, link and bridge (each step attempted)."""
        try:
            super().close()
        finally:
            for netns in self._namespaces:
                _kill_namespace_processes(netns)
                _ip("netns", "del", netns, check=False)  # takes its veth end, and so the pair, with it
            for index in range(next(self._links)):
                _ip("link", "del", f"{self._tag}v{self._serial}x{index}", check=False)
            _ip("link", "del", self.bridge, check=False)
            self._namespaces.clear()

    def __enter__(self) -> LanMesh:
        return self

    def leftovers(self) -> list[str]:
        """Names of this LAN's namespaces and links that still exist (empty after ``close``)."""
        prefix = f"{self._tag}"
        found = [
            line.split()[0]
            for line in _ip("netns", "list", check=False).stdout.splitlines()
            if line.startswith(f"{prefix}-{self._serial}-")
        ]
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
            parts = line.split(":")
            name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
            if name == self.bridge or name.startswith(f"{prefix}v{self._serial}x"):
                found.append(name)
        return found
