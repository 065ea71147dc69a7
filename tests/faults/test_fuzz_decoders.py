"""Property tests of every byte parser a peer can reach (modest budget; bench/fuzz.py runs 1,000,000)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import fuzz
from hearthnet.bus.manifest import verify_manifest
from hearthnet.bus.session import Request
from hearthnet.errors import BusError
from hearthnet.events.envelope import Event
from hearthnet.wire.codec import unpack_map
from hearthnet.wire.frames import HEADER_LEN, FrameDecoder, encode_frame

SEEDS = fuzz.build_seeds()
SETTINGS = settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

wire_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@SETTINGS
@given(
    data=st.binary(max_size=2048),
    splits=st.lists(st.integers(1, 512), max_size=20),
    max_frame=st.sampled_from([1, 16, 1024, 1 << 20]),
)
def test_frame_decoder_takes_any_bytes_in_any_split(data: bytes, splits: list[int], max_frame: int) -> None:
    dec = FrameDecoder(max_frame=max_frame)
    pos = 0
    try:
        for step in [*splits, len(data)]:
            for frame in dec.feed(data[pos : pos + step]):
                assert len(frame) <= max_frame
            pos += step
            assert dec.buffered < HEADER_LEN + max_frame  # never more than one partial frame
    except BusError:
        pass


@SETTINGS
@given(payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=6), seed=st.integers(0, 2**32))
def test_frame_decoder_returns_valid_frames_whatever_the_split(payloads: list[bytes], seed: int) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    rng = random.Random(seed)
    dec = FrameDecoder(max_frame=1024)
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, len(stream))
        out += dec.feed(stream[pos : pos + step])
        pos += step
    assert out == payloads and dec.buffered == 0


@SETTINGS
@given(data=st.binary(max_size=1024) | st.sampled_from(SEEDS.packed).map(lambda b: b[: len(b) // 2]))
def test_unpack_map_raises_only_bus_errors(data: bytes) -> None:
    try:
        assert isinstance(unpack_map(data), dict)
    except BusError:
        pass


REQ_KEYS = ["id", "capability", "version", "params", "input", "deadline_ms", "trace_id", "stream"]


@SETTINGS
@given(
    replacements=st.dictionaries(st.sampled_from(REQ_KEYS), wire_values, max_size=4),
    drop=st.sets(st.sampled_from(["id", "capability", "params", "deadline_ms"])),
)
def test_request_parse_raises_only_bus_errors(replacements: dict[str, object], drop: set[str]) -> None:
    msg = {**SEEDS.messages[0], **replacements}
    for key in drop:
        msg.pop(key, None)
    try:
        req = Request.parse(msg)
    except BusError:
        return
    assert isinstance(req.id, int) and not isinstance(req.id, bool)
    assert 0 <= req.deadline_ms <= 3_600_000 and len(req.trace_id) <= 64


@SETTINGS
@given(seed=st.integers(0, 2**32), resign=st.booleans())
def test_event_and_manifest_parsers_raise_only_bus_errors(seed: int, resign: bool) -> None:
    rng = random.Random(seed)
    event = rng.choice(SEEDS.events)
    body = fuzz.mutate(event.body, rng, SEEDS.packed)
    sig = SEEDS.identity.sign(body) if resign else event.signature
    try:
        parsed = Event.from_wire({"body": body, "sig": sig})
        assert parsed.body == body and parsed.author == SEEDS.identity.node_id
    except BusError:
        pass
    manifest = rng.choice(SEEDS.manifests)
    body = fuzz.mutate(manifest["body"], rng, SEEDS.packed)
    sig = SEEDS.identity.sign(body) if resign else manifest["sig"]
    try:
        verify_manifest(
            {"body": body, "sig": sig},
            peer_id=SEEDS.identity.node_id,
            community_id=fuzz.COMMUNITY,
            now_ms=fuzz.NOW_MS,
        )
    except BusError:
        pass


def test_bench_fuzz_quick_slice_finds_nothing() -> None:
    """2,500 inputs of the bench fuzzer itself: every target, the per-input bound and the memory bound."""
    results = fuzz.run(2_500, seed=7, per_input_limit=1.0, max_peak_mb=64.0, quiet=True)
    assert sum(r.inputs for r in results) >= 2_500
    for r in results:
        assert not r.failures, (r.name, r.failures)
        assert sum(r.rejected.values()) > 0, f"{r.name}: the mutations never reached a rejection"
