"""Hostile command-line input is one clear ``bad_request`` line, never a traceback (no node needed:
every check here runs before the CLI connects)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.client import AsyncClient
from hearthnet.errors import BadRequest
from hearthnet.frontends.cli import main

DEEP = "[" * 1000 + "]" * 1000


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> tuple[int, str]:
    """Exit code and stderr of ``hearthnet --home HOME ARGV...`` run in this process."""
    try:
        code = main(["--home", str(home), *argv])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["call", "node.ping", "--input", DEEP], "bad_request: --input is nested more than 32 levels deep"),
        (
            ["call", "node.ping", "--params", '{"a":' * 600 + "1" + "}" * 600],
            "bad_request: --params is nested more than 32 levels deep",
        ),
        (
            ["query", "x", "--corpus", "docs", "--filter", '{"$and": [' * 400 + "]}" * 400],
            "bad_request: --filter is nested more than 32 levels deep",
        ),
        (
            ["query", "x", "--corpus", "docs", "--filter", '{"page": 99999999999999999999999}'],
            "bad_request: --filter: page is a number out of range (at most 2^63-1)",
        ),
        (
            ["call", "node.echo", "--input", '{"payload": [1, NaN]}'],
            "bad_request: --input: NaN is not a finite number",
        ),
        (
            ["call", "node.echo", "--input", '{"a": 1e999}'],
            "bad_request: --input: 1e999 is not a finite number",
        ),
        (
            ["call", "node.echo", "--input", '{"a": "\\ud800"}'],
            "bad_request: --input: a is text that is not valid UTF-8",
        ),
        (["call", "node.echo", "--input", "[1]"], "bad_request: --input must be a JSON object"),
        (["call", "node.echo", "--input", "{"], "bad_request: --input is not valid JSON"),
        (
            ["query", "caf\udce9", "--corpus", "docs"],  # a Latin-1 byte on a UTF-8 command line
            "bad_request: the query is not valid UTF-8 text (character 4)",
        ),
        (["query", "", "--corpus", "docs"], "bad_request: the query is empty"),
        (["query", " \t ", "--corpus", "docs"], "bad_request: the query is empty"),
        (["ask", "boiler \udcff"], "bad_request: the question is not valid UTF-8 text (character 8)"),
        (["ask", ""], "bad_request: the question is empty"),
        (["llm", "chat", "caf\udce9"], "bad_request: the question is not valid UTF-8 text"),
        (
            ["ask", "boiler", "--timeout", "0"],
            "bad_request: --timeout must be a finite number of seconds above 0",
        ),
        (
            ["call", "node.ping", "--timeout", "inf"],
            "bad_request: --timeout must be a finite number of seconds above 0 and at most 86400 (a day), "
            "got inf",
        ),
        (
            ["call", "node.ping", "--timeout", "nan"],
            "bad_request: --timeout must be a finite number of seconds",
        ),
    ],
)
def test_hostile_json_numbers_text_and_timeouts_are_one_bad_request_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], line: str
) -> None:
    code, err = run(capsys, tmp_path, *argv)
    assert code == 1
    assert err.startswith(f"hearthnet: {line}") and err.count("\n") == 1, err


def test_usage_errors_are_one_line_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv, words in (
        (["call"], "the following arguments are required: capability"),
        (["call", "x", "--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
        (["nonsense\nwith a line break"], "invalid choice"),
        (["query", "x", "--corpus", "docs", "--timeout", "3"], "unrecognized arguments: --timeout 3"),
    ):
        code, err = run(capsys, tmp_path, *argv)
        assert code == 2
        assert err.startswith("hearthnet: ") and words in err and err.count("\n") == 1, err
        assert "--help" in err
        if argv[0] == "query":  # the command that refused it names its own help
            assert err.rstrip().endswith("(see 'hearthnet query --help')"), err


def test_a_home_naming_an_unknown_user_is_a_bad_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, Path("~no-such-user-hearthnet/x"), "status")
    assert code == 1 and err.startswith("hearthnet: bad_request: the home '~no-such-user-hearthnet/x'")


@pytest.mark.anyio
async def test_the_client_refuses_what_it_cannot_send_before_connecting(tmp_path: Path) -> None:
    client = AsyncClient(tmp_path)  # no node runs here: a refusal must come before any connect
    deep: object = 1
    for _ in range(40):
        deep = {"a": deep}
    with pytest.raises(BadRequest, match="is nested more than 32 levels deep"):
        await client.call("node.echo", input={"payload": deep})
    with pytest.raises(
        BadRequest, match=r"^input\.filter\.page is a number out of range \(at most 2\^63-1\)$"
    ):
        await client.call("rag.query", input={"filter": {"page": 2**64}})
    with pytest.raises(BadRequest, match=r"^params\.corpus is text that is not valid UTF-8$"):
        await client.call("rag.query", params={"corpus": "\udcff"})
    with pytest.raises(BadRequest, match="at most 86400"):
        await client.call("node.ping", timeout=float("inf"))


def test_init_refuses_a_name_that_is_not_utf8_before_writing_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    home = tmp_path / "new"
    code, err = run(capsys, home, "init", "--name", "caf\udce9", "--json")
    assert code == 1 and err.startswith("hearthnet: bad_request: ") and "name" in err and err.count("\n") == 1
    assert not (home / "identity.key").exists()  # not half a home: no key without its config
