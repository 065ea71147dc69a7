"""``hearthnet --help``: every argument of every command says what it is and what it defaults to,
every command has its own help, and no help shows source markup."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Iterator

import pytest

from hearthnet import __version__
from hearthnet.frontends.cli import build_parser, main


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser reachable from ``parser`` (itself first), with its command words."""
    yield " ".join(("hearthnet", *path)), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from commands(child, (*path, name))


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text of ``action`` as printed, ``%(default)s`` and the like filled in."""
    return parser._get_formatter()._expand_help(action)


ALL = list(commands(build_parser()))


def test_the_walk_sees_every_command() -> None:
    names = {name for name, _ in ALL}
    assert {"hearthnet member promote", "hearthnet file get", "hearthnet node run", "hearthnet logs"} <= names


@pytest.mark.parametrize(("name", "parser"), ALL, ids=[name for name, _ in ALL])
def test_every_argument_has_help_naming_its_default(name: str, parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        label = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help and choice.help.strip(), f"{name} {choice.dest}: no summary"
            continue
        assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, f"{name} {label}"
        text = expanded_help(parser, action)
        if action.default not in (None, argparse.SUPPRESS) and action.nargs != 0:
            assert f"default: {action.default}" in text, f"{name} {label}: default {action.default!r} unsaid"
        optional_value = action.option_strings and action.nargs != 0 and not action.required
        if optional_value and action.default is None:
            assert "default" in text, f"{name} {label}: what happens without it is unsaid"


@pytest.mark.parametrize(("name", "parser"), ALL, ids=[name for name, _ in ALL])
def test_every_command_describes_itself_without_markup(name: str, parser: argparse.ArgumentParser) -> None:
    assert parser.description and parser.description.strip(), f"{name}: no description"
    text = parser.format_help()
    assert "`" not in text, f"{name} --help shows source markup"


def test_member_promote_help_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["member", "promote", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hearthnet member promote ")
    assert "--level" in out and "(default: trusted)" in out and "--reason" not in out


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"hearthnet {__version__}\n"
    assert __version__ == importlib.metadata.version("hearthnet")  # the package and pyproject agree


@pytest.mark.parametrize(("name", "parser"), ALL, ids=[name for name, _ in ALL])
def test_required_options_say_so_and_flags_say_their_default(
    name: str, parser: argparse.ArgumentParser
) -> None:
    """A required option says "(required)"; a flag (``store_true``) says what happens without it."""
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS):
            continue
        label = "/".join(action.option_strings)
        text = expanded_help(parser, action)
        if action.required:
            assert "(required)" in text, f"{name} {label}: required but its help does not say so"
        if isinstance(action, argparse._StoreTrueAction) and action.dest not in ("json",):
            assert "default" in text, f"{name} {label}: a flag whose default (off) is unsaid"


def test_an_option_has_one_metavar_wherever_it_appears() -> None:
    """``--timeout SECONDS`` in one command and ``--timeout TIMEOUT`` in another read as two things."""
    seen: dict[str, dict[str, list[str]]] = {}
    for name, parser in ALL:
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.choices:
                continue
            shown = parser._get_formatter()._format_args(action, action.dest.upper())
            for option in action.option_strings:
                if option.startswith("--"):
                    seen.setdefault(option, {}).setdefault(shown, []).append(name)
    mixed = {option: forms for option, forms in seen.items() if len(forms) > 1}
    assert not mixed, f"options shown with different metavars: {mixed}"
