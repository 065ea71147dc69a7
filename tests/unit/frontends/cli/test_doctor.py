"""``hearthnet doctor``'s verdicts that need no mesh: a node that does not run, addresses no other
device can dial, clocks too far apart, and the firewall fix for each operating system.  The
checks against live peers run on the namespace LAN (tests/integration/test_lan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hearthnet.frontends.cli.diagnosis import (
    Diagnosis,
    _check_addresses,
    _check_discovery,
    firewall_hint,
    judge_clocks,
    judge_reach,
    judge_replicas,
)
from hearthnet.frontends.cli.main import main


def test_doctor_on_a_node_that_does_not_run_says_so_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "node"
    assert main(["--home", str(home), "init", "--name", "den", "--listen", "0.0.0.0:7700"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--home", str(home), "doctor"])
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert out.startswith("PROBLEM  node       the node does not answer:")
    assert "node run" in out and "1 problem in the way of normal use." in out
    with pytest.raises(SystemExit):
        main(["--home", str(home), "doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["problems"] == 1 and report["listen"] == "0.0.0.0:7700"


def test_doctor_without_a_home_names_the_init_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--home", str(tmp_path / "none"), "doctor"])
    assert exited.value.code == 1 and "hearthnet init" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("addresses", "level", "words"),
    [
        (["0.0.0.0:7700"], "problem", "no address another device can dial"),
        (["[::]:7700"], "problem", "no address another device can dial"),
        (["127.0.0.1:7700"], "note", "other devices cannot reach it"),
        (["192.168.1.20:7700", "100.101.102.103:7700"], "ok", "advertises 192.168.1.20:7700"),
        ([], "problem", "advertises no address"),
    ],
)
def test_advertised_addresses_other_devices_cannot_dial_are_named(
    addresses: list[str], level: str, words: str
) -> None:
    d = Diagnosis()
    _check_addresses(d, addresses, "0.0.0.0:7700")
    (finding,) = d.findings
    assert finding.level == level and words in finding.message


def test_the_fix_for_a_loopback_only_node_is_one_an_existing_node_can_apply() -> None:
    """``init --listen`` changes nothing on a home that has a node: the fix names the config key."""
    d = Diagnosis()
    _check_addresses(d, ["127.0.0.1:7711"], "127.0.0.1:7711")
    (finding,) = d.findings
    assert "init" not in finding.hint
    assert 'listen = "0.0.0.0:7711" under [network]' in finding.hint and "restart" in finding.hint


def test_a_clock_off_by_more_than_a_manifest_lives_blocks_and_a_few_seconds_is_a_note() -> None:
    d = Diagnosis()
    judge_clocks(
        d,
        [
            {"peer": "ed25519:a", "peer_name": "attic", "skew_s": -95.2},
            {"peer": "ed25519:b", "peer_name": "barn", "skew_s": 7.0},
        ],
    )
    levels = {f.message.split("'")[0]: f.level for f in d.findings}
    assert levels == {"attic": "problem", "barn": "note"}
    assert "95 s behind" in d.findings[0].message and "expire before they arrive" in d.findings[0].message
    fine = Diagnosis()
    judge_clocks(fine, [{"peer": "ed25519:c", "peer_name": "cellar", "skew_s": 0.02}])
    assert [f.level for f in fine.findings] == ["ok"] and not fine.problems


def test_the_firewall_fix_is_the_one_of_the_operating_system() -> None:
    assert "ufw allow 7700/tcp" in firewall_hint(7700, "Linux")
    assert "firewall-cmd --permanent --add-port=7700/tcp" in firewall_hint(7700, "Linux")
    assert "localport=7701" in firewall_hint(7701, "Windows") and "netsh" in firewall_hint(7701, "Windows")
    assert "System Settings" in firewall_hint(7700, "Darwin")


def _dialled(peer: str, address: str, reachable: bool, reason: str = "ok") -> dict[str, object]:
    return {
        "peer": f"ed25519:{peer}",
        "peer_name": peer,
        "address": address,
        "reachable": reachable,
        "reason": reason,
        "message": "no answer within 3 s" if reason == "timeout" else "connected",
    }


def test_an_address_no_peer_reaches_blocks_only_when_no_other_one_is_reached() -> None:
    lan, bridge = "192.168.1.23:7700", "172.17.0.1:7700"
    blocked = Diagnosis()
    judge_reach(
        blocked, [lan], [_dialled("kitchen", lan, False, "timeout"), _dialled("den", lan, False, "timeout")]
    )
    (finding,) = blocked.findings
    assert finding.level == "problem" and "peers cannot connect to 192.168.1.23:7700" in finding.message
    assert "kitchen: no answer" in finding.message and "ufw allow 7700/tcp" in finding.hint
    partial = Diagnosis()
    judge_reach(
        partial,
        [lan, bridge],
        [_dialled("kitchen", lan, True), _dialled("kitchen", bridge, False, "unreachable")],
    )
    assert [(f.level, f.message.split(" ")[0]) for f in partial.findings] == [("ok", lan), ("note", "peers")]
    assert not partial.problems


@pytest.mark.parametrize(
    ("discovery", "level", "words"),
    [
        (None, "note", "no LAN discovery"),
        ({"enabled": False, "working": False, "error": None, "found": {}}, "note", "discovery is off"),
        (
            {"enabled": True, "working": False, "error": "no multicast route", "found": {}},
            "note",
            "no multicast",
        ),
        (
            {"enabled": True, "working": True, "error": None, "found": {"ed25519:a": ["10.0.0.2:7700"]}},
            "ok",
            "1 member",
        ),
    ],
)
def test_discovery_is_reported_as_the_node_sees_it(discovery: object, level: str, words: str) -> None:
    d = Diagnosis()
    _check_discovery(d, {"discovery": discovery})
    (finding,) = d.findings
    assert finding.level == level and words in finding.message


def test_a_corpus_with_no_replica_online_is_a_note_naming_the_command() -> None:
    def host(node: str, **kw: object) -> dict[str, object]:
        return {"node": node, "node_name": node, "role": "host", "hosting": True, "online": True, **kw}

    def replica(node: str, online: bool) -> dict[str, object]:
        return {"node": node, "node_name": node, "role": "replica", "hosting": False, "online": online}

    known = [
        {"name": "family", "hosts": [host("laptop")]},
        {"name": "recipes", "hosts": [host("pi"), replica("nas", online=False)]},
        {"name": "taxes", "hosts": [host("pi"), replica("nas", online=True)]},
        {"name": "personal", "hosts": [host("pi")]},
        {"name": "ais", "hosts": [host("pi")]},
    ]
    d = Diagnosis()
    judge_replicas(d, known, archives={"ais"})
    notes = {f.message.split(" ")[1]: f for f in d.findings if f.level == "note"}
    assert set(notes) == {"family", "recipes"} and not d.problems
    assert "no replica" in notes["family"].message and "laptop" in notes["family"].message
    assert "replicas are offline" in notes["recipes"].message
    assert (
        notes["family"].hint
        == "on another trusted device that is usually on: 'hearthnet corpus replicate family'"
    )
    assert [f.message for f in d.findings if f.level == "ok"] == [
        "corpus taxes: 1 replica(s) online beside its host pi"
    ]
