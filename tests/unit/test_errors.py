"""Every error class survives the wire round trip and keeps its code."""

from __future__ import annotations

import pytest

import hearthnet.errors as errors
from hearthnet.errors import ERROR_CODES, BusError, InternalError, error_from_wire
from hearthnet.wire.codec import pack, unpack_map

CONTRACT_CODES = {
    "bad_request",
    "schema_mismatch",
    "unauthorized",
    "revoked",
    "not_found",
    "not_implemented",
    "timeout",
    "partition",
    "capacity_exceeded",
    "rate_limited",
    "invalid_signature",
    "expired",
    "internal_error",
}


def test_codes_are_exactly_the_contracts() -> None:
    assert ERROR_CODES == CONTRACT_CODES


@pytest.mark.parametrize(
    "cls",
    [
        getattr(errors, n)
        for n in errors.__all__
        if isinstance(getattr(errors, n), type)
        and issubclass(getattr(errors, n), BusError)
        and getattr(errors, n) not in (errors.ProtocolError, errors.DiskFull, errors.BusError)
    ],
)
def test_each_class_round_trips_through_msgpack(cls: type[BusError]) -> None:
    original = cls("something specific", retry_after_ms=250)
    rebuilt = error_from_wire(unpack_map(pack(original.to_wire())))
    assert type(rebuilt) is cls
    assert rebuilt.code == original.code
    assert rebuilt.message == "something specific"
    assert rebuilt.retry_after_ms == 250


def test_disk_full_travels_as_capacity_exceeded_saying_disk_full() -> None:
    rebuilt = error_from_wire(unpack_map(pack(errors.DiskFull("disk full: the blob store").to_wire())))
    assert type(rebuilt) is errors.CapacityExceeded and rebuilt.message == "disk full: the blob store"


def test_protocol_error_travels_as_bad_request() -> None:
    rebuilt = error_from_wire(errors.ProtocolError("broken frame").to_wire())
    assert rebuilt.code == "bad_request"


def test_unknown_code_becomes_internal_error_keeping_the_code() -> None:
    rebuilt = error_from_wire({"error": "brand_new_code", "message": "from a newer peer"})
    assert isinstance(rebuilt, InternalError)
    assert "brand_new_code" in rebuilt.message


@pytest.mark.parametrize(
    "payload", [{}, {"error": 5}, {"error": None, "message": 7}, {"retry_after_ms": True}]
)
def test_malformed_error_payloads_still_give_a_bus_error(payload: dict[str, object]) -> None:
    assert isinstance(error_from_wire(payload), BusError)


def test_bus_error_in_unwraps_task_group_errors_only_when_all_are_bus_errors() -> None:
    from hearthnet.errors import BadRequest, NotFound, bus_error_in

    bad = BadRequest("chunk does not match its id")
    assert bus_error_in(bad) is bad
    assert bus_error_in(ExceptionGroup("tg", [bad])) is bad
    assert bus_error_in(ExceptionGroup("tg", [ExceptionGroup("inner", [bad]), NotFound("x")])) is bad
    assert bus_error_in(ExceptionGroup("tg", [bad, KeyError("bug")])) is None
    assert bus_error_in(KeyError("bug")) is None


def test_unwrap_group_prefers_bus_errors_then_a_sole_leaf() -> None:
    from hearthnet.errors import BadRequest, unwrap_group

    bad = BadRequest("x")
    assert unwrap_group(ExceptionGroup("tg", [bad])) is bad
    broken = ConnectionResetError("peer gone")
    assert unwrap_group(ExceptionGroup("tg", [ExceptionGroup("inner", [broken])])) is broken
    two = ExceptionGroup("tg", [KeyError("a"), ValueError("b")])
    assert unwrap_group(two) is two


def test_a_helpers_bus_error_wins_over_the_broken_stream_its_partner_then_sees() -> None:
    """A worker fails while the handler is blocked on their full stream: the caller sees the worker's code."""
    import anyio

    from hearthnet.errors import BadRequest, bus_error_in

    async def scenario() -> BaseException:
        tx, rx = anyio.create_memory_object_stream[int](0)
        failed = anyio.Event()

        async def worker() -> None:
            rx.close()
            failed.set()
            raise BadRequest("chunk does not match its id")

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker)
                with anyio.CancelScope(shield=True):  # be the handler still sending when it fails
                    await failed.wait()
                    await tx.send(1)
        except BaseExceptionGroup as group:
            return group
        finally:
            tx.close()  # rx is the worker's to close
        raise AssertionError("the task group should have failed")

    group = anyio.run(scenario)
    assert isinstance(group, BaseExceptionGroup)
    assert any(isinstance(e, anyio.BrokenResourceError) for e in group.exceptions)
    err = bus_error_in(group)
    assert isinstance(err, BadRequest) and err.code == "bad_request"
    # a broken stream alone is no BusError, and a real bug next to one stays a bug
    assert bus_error_in(ExceptionGroup("tg", [anyio.BrokenResourceError()])) is None
    mixed = ExceptionGroup("tg", [BadRequest("x"), anyio.BrokenResourceError(), KeyError("bug")])
    assert bus_error_in(mixed) is None
