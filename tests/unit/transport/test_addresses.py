"""Which addresses a node advertises: dialable ones only, never a wildcard."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hearthnet.transport.addresses import (
    MAX_ADVERTISED,
    IfAddress,
    interface_addresses,
    parse_advertise,
    select_advertised,
    split_address,
)

HOST = [
    IfAddress("lo", "127.0.0.1"),
    IfAddress("lo", "::1"),
    IfAddress("eth0", "192.168.1.20"),
    IfAddress("eth0", "fe80::1%eth0"),
    IfAddress("eth0", "fd00::20"),
    IfAddress("wlan0", "169.254.7.7"),
    IfAddress("wlan1", "10.0.0.9", up=False),
    IfAddress("tailscale0", "100.64.0.7"),
]


def test_a_wildcard_listen_advertises_every_up_non_loopback_interface() -> None:
    assert select_advertised("0.0.0.0", 7700, HOST) == [
        "192.168.1.20:7700",
        "100.64.0.7:7700",
        "169.254.7.7:7700",  # IPv4 link-local works without a scope, but goes last
    ]
    # "::" is IPv6 only (anyio binds it so); link-local left out: its scope id names our interface
    assert select_advertised("::", 7700, HOST) == ["[fd00::20]:7700"]


def test_a_specific_listen_advertises_itself_and_loopback_only_then() -> None:
    assert select_advertised("127.0.0.1", 7000, HOST) == ["127.0.0.1:7000"]
    assert select_advertised("::1", 7000, HOST) == ["[::1]:7000"]
    assert select_advertised("192.168.1.20", 7000, HOST) == ["192.168.1.20:7000"]


def test_a_host_without_a_network_falls_back_to_loopback() -> None:
    only_lo = [IfAddress("lo", "127.0.0.1"), IfAddress("eth0", "192.168.1.20", up=False)]
    assert select_advertised("0.0.0.0", 7700, only_lo) == ["127.0.0.1:7700"]


def test_configured_addresses_replace_the_interfaces() -> None:
    configured = [("100.64.0.7", None), ("vpn.example.net", 7701), ("fd7a::1", None)]
    assert select_advertised("0.0.0.0", 7700, HOST, configured) == [
        "100.64.0.7:7700",
        "vpn.example.net:7701",
        "[fd7a::1]:7700",
    ]


@given(
    st.lists(
        st.tuples(st.sampled_from(["lo", "eth0", "wlan0"]), st.ip_addresses(), st.booleans()), max_size=40
    ),
    st.sampled_from(["0.0.0.0", "::"]),
)
def test_never_a_wildcard_never_too_many_always_dialable(
    entries: list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address, bool]], listen: str
) -> None:
    interfaces = [IfAddress(name, str(ip), up) for name, ip, up in entries]
    chosen = select_advertised(listen, 7700, interfaces)
    assert 1 <= len(chosen) <= MAX_ADVERTISED
    for address in chosen:
        host, port = split_address(address)
        ip = ipaddress.ip_address(host)
        assert port == 7700 and not ip.is_unspecified and not ip.is_multicast
        assert not (ip.version == 6 and ip.is_link_local)


def test_this_hosts_interfaces_are_read() -> None:
    found = interface_addresses()
    assert any(ipaddress.ip_address(a.ip.split("%")[0]).is_loopback for a in found)
    for address in select_advertised("0.0.0.0", 7700, found):
        assert not ipaddress.ip_address(split_address(address)[0]).is_unspecified


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("100.64.0.7", ("100.64.0.7", None)),
        ("100.64.0.7:7701", ("100.64.0.7", 7701)),
        ("vpn.example.net", ("vpn.example.net", None)),
        ("[fd7a::1]:7702", ("fd7a::1", 7702)),
        ("[fd7a::1]", ("fd7a::1", None)),
        ("fd7a::1", ("fd7a::1", None)),
    ],
)
def test_advertise_entries(entry: str, parsed: tuple[str, int | None]) -> None:
    assert parse_advertise(entry, "--advertise") == parsed


@pytest.mark.parametrize("entry", ["0.0.0.0", "0.0.0.0:7700", "::", "[::]:7700", ""])
def test_a_wildcard_or_nothing_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="--advertise"):
        parse_advertise(entry, "--advertise")


@pytest.mark.parametrize("entry", ["host:0", "host:99999", "host:x", "[fd7a::1]x", "a b", "fe80::1%eth0"])
def test_a_malformed_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="--advertise"):
        parse_advertise(entry, "--advertise")


def test_addresses_are_split_as_written_and_as_older_nodes_wrote_them() -> None:
    assert split_address("[fd00::2]:7700") == ("fd00::2", 7700)
    assert split_address("192.168.1.20:7700") == ("192.168.1.20", 7700)
    assert split_address("::1:7000") == ("::1", 7000)  # an older node's peers.json
    for bad in ("a:b:7000", "[fd00::2:7700", "host:0", "host", ":7000"):
        with pytest.raises(ValueError):
            split_address(bad)
