"""``hearthnet community create`` works on the home directly: a refused name leaves it usable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hearthnet.cli import main


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
    sneaky = 'ev"il\\ \U0001f525 \x7f\n[network]\nlisten = "0.0.0.0:9"'
    assert main(["init", "--home", str(home), "--name", sneaky, "--listen", "127.0.0.1:0"]) == 0
    config = load_config(home)
    assert config.name == sneaky and config.network.listen_host == "127.0.0.1"


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
        [sys.executable, "-m", "hearthnet.cli", "--home", str(tmp_path / "empty"), "node", "run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1  # no identity yet
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("hearthnet: ")


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
