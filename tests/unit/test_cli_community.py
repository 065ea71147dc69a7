"""``hearthnet community create`` works on the home directly: a refused name leaves it usable."""

from __future__ import annotations

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
    sneaky = 'ev"il\n[network]\nlisten = "0.0.0.0:9"'
    assert main(["init", "--home", str(home), "--name", sneaky, "--listen", "127.0.0.1:0"]) == 0
    config = load_config(home)
    assert config.name == sneaky and config.network.listen_host == "127.0.0.1"


def test_failures_around_the_home_are_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    assert main(["init", "--home", str(a_file)]) == 1
    assert main(["node", "run", "--home", str(tmp_path / "empty")]) == 1  # no identity yet
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and all(line.startswith("hearthnet: ") for line in err.splitlines())
    assert "Traceback" not in err
