"""``hearthnet community create`` works on the home directly: a refused name leaves it usable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hearthnet.frontends.cli import main


@pytest.mark.parametrize("bad_name", ["", "x" * 129])
def test_a_refused_community_name_binds_nothing(
    tmp_path: Path, bad_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path / "home")
    assert main(["init", "--home", home, "--name", "n1"]) == 0
    assert main(["community", "create", bad_name, "--home", home]) == 1
    assert "bad_request" in capsys.readouterr().err
    assert main(["community", "create", "Hearth", "--home", home, "--json"]) == 0
    assert '"name": "Hearth"' in capsys.readouterr().out


def test_init_escapes_the_name_and_checks_everything_before_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hearthnet.config import load_config

    home = tmp_path / "home"
    assert main(["init", "--home", str(home), "--listen", "no-port"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert not (home / "identity.key").exists()  # so a corrected retry is not refused
    assert main(["init", "--home", str(home), "--listen", "999.1.1.1:7700"]) == 1
    assert "--listen must be HOST:PORT" in capsys.readouterr().err
    multiline = 'evil\n[network]\nlisten = "0.0.0.0:9"'
    assert main(["init", "--home", str(home), "--name", multiline]) == 1
    assert capsys.readouterr().err.startswith("hearthnet: bad_request: --name must be printable")
    assert not home.exists()
    sneaky = 'ev"il\\ \U0001f525 [network] listen = "0.0.0.0:9"'
    assert main(["init", "--home", str(home), "--name", sneaky, "--listen", "127.0.0.1:0"]) == 0
    config = load_config(home)
    assert config.name == sneaky and config.network.listen_host == "127.0.0.1"


def test_init_writes_the_advertised_addresses_and_refuses_a_wildcard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hearthnet.config import load_config

    home = tmp_path / "home"
    args = ["init", "--home", str(home), "--listen", "0.0.0.0:7700"]
    assert main([*args, "--advertise", "0.0.0.0"]) == 1
    assert "wildcard" in capsys.readouterr().err
    assert not home.exists()  # checked before any file
    assert main([*args, "--advertise", "100.64.0.7", "--advertise", "[fd7a::1]:7701"]) == 0
    config = load_config(home, env={})
    assert config.network.advertise == (("100.64.0.7", None), ("fd7a::1", 7701))
    assert config.network.discovery is True


def test_init_on_an_existing_home_shows_its_node_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second ``init`` used to fail ("an identity already exists"): now it says the home is
    there, with its node id, and leaves every file as it was."""
    import json

    home = tmp_path / "home"
    assert main(["init", "--home", str(home), "--name", "kitchen", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["existing"] is False
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in home.iterdir()}
    assert main(["init", "--home", str(home), "--name", "other", "--listen", "0.0.0.0:7700", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == {"node_id": first["node_id"], "home": str(home), "name": "kitchen", "existing": True}
    assert main(["init", "--home", str(home), "--name", "other"]) == 0
    out, err = capsys.readouterr()
    assert out == first["node_id"] + "\n"
    assert err.startswith(f"hearthnet: {home} already holds node 'kitchen'; nothing was changed")
    assert "--name not applied" in err and err.count("\n") == 1
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in home.iterdir()} == files


def test_failures_around_the_home_are_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    assert main(["init", "--home", str(a_file)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hearthnet: ")
    # in a process of its own: `node run` configures process-wide logging
    run = subprocess.run(
        [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(tmp_path / "empty"), "node", "run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1  # no identity yet
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("hearthnet: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["events"],
        ["query", "boiler", "--corpus", "family"],
        ["community", "create", "Hearth"],
        ["join", "hn1.x.y"],
        ["logs"],
        ["ui", "token", "list"],
        ["node", "run"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_home_that_does_not_exist_is_named_with_the_command_that_creates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """QA I: ``status`` said "no node is running … start it with node run", which then said to run
    ``init``; and ``node run`` created the missing home, empty."""
    home = tmp_path / "nohome"
    assert main(["--home", str(home), *argv]) == 1
    assert capsys.readouterr().err == (
        f"hearthnet: not_found: no node home at {home}: create one with 'hearthnet init --home {home}'\n"
    )
    assert not home.exists()  # nothing created, by 'node run' either
    if argv == ["logs"]:
        return  # a directory with no key may still hold logs to read
    home.mkdir()  # a directory without an identity is no node home either
    assert main(["--home", str(home), *argv]) == 1
    assert "no node home at" in capsys.readouterr().err
    assert [p.name for p in home.iterdir()] == []


def test_a_home_without_a_running_node_says_to_start_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    assert main(["init", "--home", str(home)]) == 0
    capsys.readouterr()
    assert main(["status", "--home", str(home)]) == 1
    assert f"no node is running for home {home}: start it with 'hearthnet --home {home} node run'" in (
        capsys.readouterr().err
    )


def test_community_create_and_join_refuse_a_node_that_is_still_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A starting node holds node.lock seconds before its control socket exists; writing the
    event log then left the node running without the community until a restart."""
    import fcntl

    home = tmp_path / "home"
    assert main(["init", "--home", str(home), "--name", "n1"]) == 0
    capsys.readouterr()
    with (home / "node.lock").open("a+") as held:  # as 'node run' holds it from its start
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["community", "create", "Hearth", "--home", str(home)]) == 1
        assert "stop the running node first ('community create'" in capsys.readouterr().err
        assert not (home / "events.sqlite3").exists()  # nothing written while the node starts
    assert main(["community", "create", "Hearth", "--home", str(home), "--json"]) == 0
    assert '"name": "Hearth"' in capsys.readouterr().out
