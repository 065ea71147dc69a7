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
