"""Every ``hearthnet`` subcommand, fed hostile arguments against a real running node: one clear
line on stderr and exit 1 or 2 (or a success), never a traceback, never a hang.

The subcommands are read from ``build_parser()``, so commands added later are covered without
touching this file; each argument that takes a value gets each hostile value in turn (the
others get harmless ones) against the node, and the textual ones also with ``--json`` on a
home of its own (where ``init`` gets past "identity exists"); each command also runs against homes
that are missing, a symlink loop, a file or a path too long.  The command lines run in
processes forked from one that has the CLI loaded (``tests/cli_fork.py``): hundreds of them
in seconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.frontends.cli import build_parser
from hearthnet.testing import LocalMesh, MeshNode
from tests.cli_fork import HUNG, run_many

TEN_K = "x" * 10_000
FRESH = ("lone surrogate", "10k characters", "empty", "symlink loop")
"""The values also tried with ``--json`` on a home of its own: those a command may write into a
new home (a name, a path) or print back."""


def hostile_values(tmp: Path) -> dict[str, str]:
    loop = tmp / "loop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    return {
        "deep JSON list": "[" * 1000 + "]" * 1000,
        "deep JSON object": '{"a":' * 1000 + "1" + "}" * 1000,
        "huge number in JSON": '{"page": 99999999999999999999999}',
        "huge number": "99999999999999999999999",
        "lone surrogate": "caf\udce9",  # what a Latin-1 byte on a UTF-8 command line becomes
        "empty": "",
        "10k characters": TEN_K,
        "nonexistent path": str(tmp / "no" / "such" / "file.pdf"),
        "symlink loop": str(loop),
    }


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(command words, parser)`` of every runnable subcommand."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from leaves(sub, (*path, name))


def slots(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of a subcommand that take a value (not --home, --json, --help or flags)."""
    return [
        a
        for a in parser._actions
        if a.dest not in ("help", "home", "json")
        and a.nargs != 0
        and not isinstance(a, argparse._SubParsersAction)
    ]


def harmless(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type in (int, float):
        return "1"
    return "nothing-here"


def command_line(
    words: tuple[str, ...], parser: Any, home: Path, hostile: argparse.Action | None, value: str
) -> list[str]:
    """``words`` with every required argument (and ``hostile``) given; ``hostile`` gets ``value``."""
    positional: list[str] = []
    options: list[str] = []
    for action in slots(parser):
        if action is not hostile and not action.required and action.option_strings:
            continue
        given = value if action is hostile else harmless(action)
        if action.option_strings:
            options += [action.option_strings[-1], given]
        else:
            positional.append(given)
    return ["--home", str(home), *words, *positional, *options]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshNode]:
    m = LocalMesh(tmp_path_factory.mktemp("hostile"))
    try:
        a = m.add("a")
        m.found(a)
        yield a
    finally:
        m.close()


def test_every_subcommand_meets_hostile_arguments_with_one_line(node: MeshNode, tmp_path: Path) -> None:
    values = hostile_values(tmp_path)
    home_file = tmp_path / "a-file"
    home_file.write_text("not a home")
    homes = {
        "missing home": tmp_path / "missing",  # one of its own per command: `init` creates it
        "home is a symlink loop": Path(values["symlink loop"]),
        "home is a file": home_file,
        "home path of 10k characters": tmp_path / TEN_K,
    }
    cases: list[tuple[str, list[str]]] = []
    commands = list(leaves(build_parser()))
    assert len(commands) >= 16  # init ... rag reindex, and whatever was added since
    for words, parser in commands:
        what = " ".join(words)
        for action in slots(parser):
            name = action.option_strings[-1] if action.option_strings else action.dest.upper()
            for label, value in values.items():
                cases.append(
                    (f"{what} {name}={label}", command_line(words, parser, node.home, action, value))
                )
                if label in FRESH:  # ... and on a home of its own, where `init` gets further
                    fresh = tmp_path / "fresh" / str(len(cases)) / "home"
                    argv = [*command_line(words, parser, fresh, action, value), "--json"]
                    cases.append((f"{what} {name}={label} --json", argv))
        for label, home in homes.items():
            if label == "missing home":
                home = home / "-".join(words) / "home"
            cases.append((f"{what} ({label})", command_line(words, parser, home, None, "")))
    results = run_many([argv for _, argv in cases], env=node.env, cwd=tmp_path, timeout=60, parallel=4)

    problems = []
    for (label, _), r in zip(cases, results, strict=True):
        out, err, code = r["stdout"], r["stderr"], r["code"]
        if code == HUNG:
            problems.append(f"{label}: still running after 60 s")
        elif "Traceback" in out + err or "unexpected error" in err:
            problems.append(f"{label}: {err.strip().splitlines()[-1][:300] if err.strip() else out[:300]}")
        elif code not in (0, 1, 2):
            problems.append(f"{label}: exit {code}")
        elif code != 0 and not (err.startswith("hearthnet: ") and err.count("\n") == 1):
            problems.append(f"{label}: exit {code} with stderr {err[:300]!r}")
    slowest = max(zip(cases, results, strict=True), key=lambda cr: cr[1]["seconds"])
    print(
        f"{len(cases)} hostile command lines over {len(commands)} subcommands; "
        f"slowest {slowest[1]['seconds']:.1f} s ({slowest[0][0][:60]})"
    )
    assert not problems, "\n".join(problems)
