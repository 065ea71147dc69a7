"""Mutation fuzzing of everything that parses bytes from a peer.

Targets (each gets an equal share of the input budget):

- ``frames``   ``FrameDecoder.feed``: valid frame streams, mutated, fed in random splits;
  with an oracle (unmutated streams must come back frame for frame) and a
  buffer bound (after ``feed`` returns, at most one partial frame is held).
- ``codec``    ``unpack_map`` on mutated wire messages and random bytes.
- ``request``  ``Request.parse`` on decoded mutated ``req`` messages and on
  structurally mutated ``req`` maps (fields replaced by hostile values).
- ``event``    ``Event.from_wire`` on mutated bodies/signatures; a share of the
  mutated bodies is re-signed so the checks *after* the signature run too.
- ``manifest`` ``verify_manifest`` likewise.

Asserted for every input: only ``BusError`` subclasses escape; the input ends
within ``--per-input-limit`` seconds (and a watchdog kills the run with a
traceback if one never ends); memory stays bounded (tracemalloc peak, sampled
on every 10th block of inputs because tracing every allocation triples the
cost).  Prints inputs/s per target and the totals.

    python -m bench.fuzz            # 1,000,000 inputs
    python -m bench.fuzz --quick    # 50,000 inputs
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import random
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import Metric
from hearthnet.bus.descriptors import CapabilityDescriptor
from hearthnet.bus.manifest import sign_manifest, verify_manifest
from hearthnet.bus.session import Request
from hearthnet.errors import BusError
from hearthnet.events.envelope import Event, sign_event
from hearthnet.identity import Identity
from hearthnet.wire.codec import pack, unpack_map
from hearthnet.wire.frames import HEADER, HEADER_LEN, FrameDecoder, encode_frame

COMMUNITY = "hc1:fuzzfuzzfuzzfuzzfuzzfw"
NOW_MS = 1_700_000_000_000
INTERESTING_BYTES = bytes(
    [0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9,
     0xCA, 0xCB, 0xCF, 0xD3, 0xD4, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0x90, 0x9F, 0x80, 0x8F,
     0xA0, 0xBF]
)  # fmt: skip
INTERESTING_LENGTHS = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 20, 1 << 21]
HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1 << 63, -(1 << 63), (1 << 64) - 1, 1.5, math.nan, math.inf, -math.inf,
    "", "x" * 5000, "\udc80".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), b"", b"\x00" * 300,
    [], [1, 2, 3], {}, {"a": {"b": {"c": []}}}, [[[[[]]]]],
]  # fmt: skip


def mutate(data: bytes, rng: random.Random, seeds: list[bytes]) -> bytes:
    """One to four byte-level mutations (flip, interesting byte/length, insert, delete, dup, splice)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        n = len(buf)
        if op == 0 and n:
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.choice(INTERESTING_BYTES)
        elif op == 2 and n >= 4:
            pos = rng.randrange(n - 3)
            buf[pos : pos + 4] = HEADER.pack(rng.choice(INTERESTING_LENGTHS) & 0xFFFFFFFF)
        elif op == 3:
            pos = rng.randint(0, n)
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and n:
            start = rng.randrange(n)
            del buf[start : start + rng.randint(1, 32)]
        elif op == 5 and n:
            start = rng.randrange(n)
            piece = buf[start : start + rng.randint(1, 64)]
            pos = rng.randint(0, n)
            buf[pos:pos] = piece * rng.randint(1, 8)
        elif op == 6 and n:
            del buf[rng.randrange(n) :]
        elif op == 7:
            other = rng.choice(seeds)
            if other:
                cut = rng.randint(0, len(other))
                pos = rng.randint(0, n)
                buf[pos:] = other[cut:]
        else:
            buf += rng.randbytes(rng.randint(1, 8))
    return bytes(buf)


def random_bytes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice([0, 1, 2, 5, 16, 64, 256, 2048]))


# ---------------------------------------------------------------------------- seeds
@dataclass
class Seeds:
    identity: Identity
    messages: list[dict[str, Any]]
    packed: list[bytes]
    events: list[Event]
    manifests: list[dict[str, Any]]


def build_seeds() -> Seeds:
    identity = Identity.from_seed(bytes(range(32)))
    messages: list[dict[str, Any]] = [
        {"t": "req", "id": 7, "capability": "rag.query", "version": "1.0", "params": {"corpus": "family"},
         "input": {"query": "boiler", "k": 5}, "deadline_ms": 5000, "trace_id": "ab" * 8, "stream": False},
        {"t": "req", "id": 8, "capability": "embed.text", "version": "1.2", "params": {},
         "input": {"texts": ["a", "b" * 300]}, "deadline_ms": 10_000.5, "trace_id": "", "stream": True},
        {"t": "done", "id": 7, "output": {"chunks": [{"text": "x", "score": 0.5}]}, "meta": {"ms": 1.2}},
        {"t": "error", "id": 7, "error": "capacity_exceeded", "message": "busy", "retry_after_ms": 50},
        {"t": "frame", "id": 8, "data": {"stage": "embed", "current": 32, "total": 100}},
        {"t": "credit_in", "id": 8, "n": 8},
        {"t": "events_changed"},
        {"t": "in", "id": 9, "data": {"bytes": b"\x00" * 64}},
    ]  # fmt: skip
    events = [
        sign_event(identity, community_id=COMMUNITY, event_type="member.invited",
                   data={"node_id": Identity.from_seed(bytes([i]) * 32).node_id, "level": "member"},
                   lamport=i + 1, seq=i + 1, wall_clock=NOW_MS)
        for i in range(3)
    ]  # fmt: skip
    caps = [
        CapabilityDescriptor("rag.query", (1, 0), params={"corpus": "family"}),
        CapabilityDescriptor("embed.text", (1, 1), params={"model": "all-MiniLM-L6-v2", "max_tokens": 256}),
    ]
    manifests = [
        sign_manifest(identity, community_id=COMMUNITY, seq=s, now_ms=NOW_MS, name="fuzz",
                      addresses=["127.0.0.1:7700"], capabilities=caps[: s % 3])
        for s in range(1, 4)
    ]  # fmt: skip
    messages.append({"t": "manifest", "manifest": manifests[0]})
    messages.append({"t": "done", "id": 3, "output": {"events": [e.to_wire() for e in events]}, "meta": {}})
    packed = [pack(m) for m in messages] + [e.body for e in events] + [m["body"] for m in manifests]
    return Seeds(identity, messages, packed, events, manifests)


# --------------------------------------------------------------------------- targets
class Violation(AssertionError):
    pass


def t_frames(rng: random.Random, s: Seeds) -> None:
    payloads = [rng.choice(s.packed)[: rng.randint(0, 300)] for _ in range(rng.randint(1, 4))]
    stream = b"".join(encode_frame(p) for p in payloads)
    mutated = rng.random() < 0.8
    if mutated:
        stream = mutate(stream, rng, s.packed) if rng.random() < 0.9 else random_bytes(rng)
    max_frame = rng.choice([16, 256, 4096, 1 << 20])
    dec = FrameDecoder(max_frame=max_frame)
    out: list[bytes] = []
    pos = 0
    try:
        while pos < len(stream):
            step = rng.randint(1, max(1, len(stream) - pos))
            out.extend(dec.feed(stream[pos : pos + step]))
            pos += step
            if dec.buffered >= HEADER_LEN + max_frame:
                raise Violation(f"decoder holds {dec.buffered} bytes with max_frame {max_frame}")
    except BusError:
        if not mutated and all(len(p) <= max_frame for p in payloads):
            raise Violation("a valid stream was refused") from None
        raise
    if not mutated and max_frame >= max(len(p) for p in payloads) and out != payloads:
        raise Violation("valid frames came back different")


def t_codec(rng: random.Random, s: Seeds) -> None:
    data = mutate(rng.choice(s.packed), rng, s.packed) if rng.random() < 0.9 else random_bytes(rng)
    unpack_map(data)


def _structural_req(rng: random.Random, s: Seeds) -> dict[str, Any]:
    msg = dict(rng.choice(s.messages[:2]))
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*msg, "id", "capability", "params", "input", "deadline_ms", "extra"])
        if rng.random() < 0.2:
            msg.pop(key, None)
        else:
            msg[key] = rng.choice(HOSTILE_VALUES)
    return msg


def t_request(rng: random.Random, s: Seeds) -> None:
    if rng.random() < 0.5:
        msg = unpack_map(mutate(pack(rng.choice(s.messages[:2])), rng, s.packed))
    else:
        msg = _structural_req(rng, s)
    req = Request.parse(msg)
    if not (0 <= req.deadline_ms <= 3_600_000) or len(req.trace_id) > 64:
        raise Violation(f"Request.parse let through deadline {req.deadline_ms} / trace {len(req.trace_id)}")


def t_event(rng: random.Random, s: Seeds) -> None:
    ev = rng.choice(s.events)
    body, sig = ev.body, ev.signature
    r = rng.random()
    if r < 0.45:
        body = mutate(body, rng, s.packed)
    elif r < 0.75:
        body = mutate(body, rng, s.packed)
        sig = s.identity.sign(body)  # signed garbage: exercises the checks after the signature
    elif r < 0.9:
        sig = mutate(sig, rng, s.packed)
    else:
        wire: Any = rng.choice([{"body": body}, {"body": rng.choice(HOSTILE_VALUES), "sig": sig}, [body, sig],
                                {"body": body, "sig": rng.choice(HOSTILE_VALUES)}, None])  # fmt: skip
        Event.from_wire(wire)
        return
    parsed = Event.from_wire({"body": body, "sig": sig})
    if parsed.body != body:
        raise Violation("Event.from_wire changed the body bytes")


def t_manifest(rng: random.Random, s: Seeds) -> None:
    man = rng.choice(s.manifests)
    body, sig = man["body"], man["sig"]
    r = rng.random()
    if r < 0.4:
        body = mutate(body, rng, s.packed)
    elif r < 0.85:
        body = mutate(body, rng, s.packed)
        sig = s.identity.sign(body)
    else:
        sig = mutate(sig, rng, s.packed)
    wire = {"body": body, "sig": sig}
    verify_manifest(wire, peer_id=s.identity.node_id, community_id=COMMUNITY, now_ms=NOW_MS)


TARGETS: dict[str, Callable[[random.Random, Seeds], None]] = {
    "frames": t_frames,
    "codec": t_codec,
    "request": t_request,
    "event": t_event,
    "manifest": t_manifest,
}


# ------------------------------------------------------------------------------ run
@dataclass
class TargetResult:
    name: str
    inputs: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    max_input_ms: float = 0.0
    peak_bytes: int = 0
    failures: list[str] = field(default_factory=list)


def run_target(
    name: str, n: int, *, seed: int, seeds: Seeds, per_input_limit: float, block: int = 1000
) -> TargetResult:
    fn = TARGETS[name]
    rng = random.Random(f"{seed}:{name}")
    res = TargetResult(name)
    started = time.perf_counter()
    done = 0
    block_no = 0
    while done < n:
        todo = min(block, n - done)
        traced = block_no % 10 == 0
        if traced:
            tracemalloc.start()
        # A hang never returns: the watchdog prints every thread's stack and exits non-zero.
        faulthandler.dump_traceback_later(max(30.0, per_input_limit * 10), exit=True)
        for _ in range(todo):
            state = rng.getstate()
            t0 = time.perf_counter()
            try:
                fn(rng, seeds)
                res.accepted += 1
            except BusError as exc:
                res.rejected[exc.code] += 1
            except Exception as exc:  # anything else escaping is a finding
                if len(res.failures) < 10:
                    res.failures.append(f"{type(exc).__name__}: {exc!s:.200} (rng state hash {hash(state)})")
            elapsed = time.perf_counter() - t0
            res.max_input_ms = max(res.max_input_ms, elapsed * 1000)
            if elapsed > per_input_limit and len(res.failures) < 10:
                res.failures.append(f"input took {elapsed:.3f}s > {per_input_limit}s")
        faulthandler.cancel_dump_traceback_later()
        if traced:
            res.peak_bytes = max(res.peak_bytes, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        done += todo
        block_no += 1
    res.inputs = done
    res.seconds = time.perf_counter() - started
    return res


def run(
    total: int, *, seed: int = 1, per_input_limit: float = 1.0, max_peak_mb: float = 64.0,
    targets: list[str] | None = None, quiet: bool = False,
) -> list[TargetResult]:  # fmt: skip
    names = targets or list(TARGETS)
    seeds = build_seeds()
    per = -(-total // len(names))
    results = []
    for name in names:
        res = run_target(name, per, seed=seed, seeds=seeds, per_input_limit=per_input_limit)
        results.append(res)
        if not quiet:
            top = ", ".join(f"{k} {v}" for k, v in res.rejected.most_common(4))
            print(
                f"{name:9s} {res.inputs:>9,d} inputs {res.inputs / res.seconds:>9,.0f}/s  "
                f"accepted {res.accepted:>7,d}  rejected {sum(res.rejected.values()):>9,d} ({top})  "
                f"max {res.max_input_ms:6.2f} ms/input  peak {res.peak_bytes / 1e6:5.2f} MB  "
                f"failures {len(res.failures)}",
                flush=True,
            )
            for f in res.failures:
                print(f"    FAIL {f}")
    peak = max(r.peak_bytes for r in results)
    if not quiet:
        inputs = sum(r.inputs for r in results)
        seconds = sum(r.seconds for r in results)
        print(
            f"TOTAL     {inputs:>9,d} inputs in {seconds:.1f}s ({inputs / seconds:,.0f}/s), "
            f"failures {sum(len(r.failures) for r in results)}, "
            f"max {max(r.max_input_ms for r in results):.2f} ms/input, peak {peak / 1e6:.2f} MB "
            f"(limit {max_peak_mb} MB)"
        )
    if peak > max_peak_mb * 1e6:
        for r in results:
            r.failures.append(f"tracemalloc peak {r.peak_bytes / 1e6:.1f} MB > {max_peak_mb} MB")
    return results


def bench_metrics(quick: bool) -> list[Metric]:
    """The fuzz run as rows of ``make bench``: 1,000,000 inputs (50,000 with --quick)."""
    total = 50_000 if quick else 1_000_000
    results = run(total)
    inputs = sum(r.inputs for r in results)
    failures = sum(len(r.failures) for r in results)
    seconds = sum(r.seconds for r in results)
    peak_mb = max(r.peak_bytes for r in results) / 1e6
    return [
        Metric(
            "evidence",
            f"fuzz: decoder/parser failures in {inputs:,} inputs",
            "count",
            float(failures),
            None,
            None,
            ">= 1,000,000 inputs (full run), 0 failures",
            failures == 0 and (quick or inputs >= 1e6),
            note=f"{inputs / seconds:,.0f} inputs/s; slowest {max(r.max_input_ms for r in results):.1f} ms; "
            f"peak {peak_mb:.2f} MB",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 inputs instead of 1,000,000")
    parser.add_argument("--inputs", type=int, default=None, help="total inputs over all targets")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-input-limit", type=float, default=1.0, help="seconds")
    parser.add_argument("--target", action="append", choices=list(TARGETS))
    args = parser.parse_args(argv)
    total = args.inputs or (50_000 if args.quick else 1_000_000)
    results = run(total, seed=args.seed, per_input_limit=args.per_input_limit, targets=args.target)
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
