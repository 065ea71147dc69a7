"""The ``hearthnet`` command line: its parser, built from each command group's module, and ``main``.

Every command takes ``--home DIR`` (default ``$HEARTHNET_HOME``, then
``~/.hearthnet``) and ``--json`` (one JSON document on stdout).  Failures exit
non-zero with a one-line reason on stderr.  ``init``, ``community create``,
``join`` and ``node run`` work on the home directly (:mod:`.home`); every other
command talks to the running node through its control socket.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from hearthnet import __version__
from hearthnet.errors import BusError, unwrap_group
from hearthnet.frontends.cli.args import timeout_arg
from hearthnet.frontends.cli.ask import add_ask, add_sessions
from hearthnet.frontends.cli.community import add_invite, add_member
from hearthnet.frontends.cli.corpora import add_corpora, add_delete, add_docs, add_query, add_rag
from hearthnet.frontends.cli.doctor import add_doctor
from hearthnet.frontends.cli.files import add_file
from hearthnet.frontends.cli.home import add_community, add_init, add_join, add_node
from hearthnet.frontends.cli.ingest import add_ingest
from hearthnet.frontends.cli.llm import add_llm
from hearthnet.frontends.cli.logs import add_logs
from hearthnet.frontends.cli.mcp import add_mcp
from hearthnet.frontends.cli.node import add_call, add_events, add_status
from hearthnet.frontends.cli.output import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CliError, one_line
from hearthnet.frontends.cli.replicas import add_corpus
from hearthnet.frontends.cli.ui import add_ui
from hearthnet.frontends.cli.watch import add_watch
from hearthnet.frontends.client.client import resolve_home

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
A HearthNet node and its command line.

'init', 'community create', 'join' and 'node run' work on the home directly;
every other command talks to the running node through its control socket.
Every command takes --home DIR and --json; a failure exits non-zero with one
line 'hearthnet: ...' on stderr."""

AddCommand = Callable[[Any, argparse.ArgumentParser], None]
"""Adds one top-level command (or a group of them) to the subparsers, with ``common`` as parent."""

COMMANDS: tuple[AddCommand, ...] = (
    add_init,
    add_community,
    add_invite,
    add_join,
    add_node,
    add_status,
    add_doctor,
    add_call,
    add_events,
    add_member,
    add_file,
    add_ingest,
    add_query,
    add_corpora,
    add_corpus,
    add_docs,
    add_delete,
    add_watch,
    add_rag,
    add_logs,
    add_llm,
    add_ask,
    add_sessions,
    add_ui,
    add_mcp,
)
"""Every top-level command, in the order ``hearthnet --help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr, like every other failure (exit 2).

    Sub-command parsers are made of the same class (``add_subparsers`` uses the parent's).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"hearthnet: {one_line(message)} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--home",
        type=Path,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="node home (default: $HEARTHNET_HOME, then ~/.hearthnet)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document on stdout"
    )

    parser = _Parser(
        prog="hearthnet",
        parents=[common],
        description=DESCRIPTION,
        epilog="Run 'hearthnet COMMAND --help' for the options of a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"hearthnet {__version__}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub, common)
    _describe_subcommands(parser)
    return parser


def _describe_subcommands(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's own ``--help`` the one-line summary its parent lists it with."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                if child.description is None:
                    child.description = summaries.get(name)
                _describe_subcommands(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # refused by the command they were given to, which names its own --help
        _command_parser(parser, sys.argv[1:] if argv is None else list(argv)).error(
            f"unrecognized arguments: {' '.join(extras)}"
        )
    args.json = getattr(args, "json", False)
    try:
        args.home = resolve_home(getattr(args, "home", None))  # '~nobody/x' fails here
        timeout_arg(getattr(args, "timeout", None))  # every command's --timeout, before any node is asked
        args.func(args)
    except BaseException as exc:  # every failure is one line: never a traceback
        return _report(exc, getattr(args, "home", None))
    return 0


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)command parser the words of ``argv`` lead to: ``hearthnet query`` for ``query x --y``."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def _report(exc: BaseException, home: Path | None) -> int:
    """Print ``exc`` as one ``hearthnet: ...`` line on stderr; the exit code it means."""
    if isinstance(exc, BaseExceptionGroup):  # a failure inside a task group
        inner = unwrap_group(exc)
        if inner is not exc:
            return _report(inner, home)
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        line = "interrupted"
    elif isinstance(exc, CliError):
        line = str(exc)
    elif isinstance(exc, BusError):
        line = f"{exc.code}: {exc.message}"
    elif isinstance(exc, BrokenPipeError):
        return EXIT_FAILURE  # the reader went away: nobody to tell
    elif isinstance(exc, OSError):  # a home that is a file, a socket path too long, a full disk, ...
        where = f" ({exc.filename})" if exc.filename else ""
        line = f"{exc.strerror or exc}{where}"
    elif isinstance(exc, sqlite3.Error):
        line = f"a database in {home} cannot be used: {exc}"
    else:
        line = f"unexpected error: {type(exc).__name__}: {exc} (a bug in hearthnet: please report it)"
    print(f"hearthnet: {one_line(line)}", file=sys.stderr)
    return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE
