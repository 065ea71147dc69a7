"""The ``hearthnet`` command line.

Every command takes ``--home DIR`` (default ``$HEARTHNET_HOME``, then
``~/.hearthnet``) and ``--json`` (one JSON document on stdout).  Failures exit
non-zero with a one-line reason on stderr.  ``init``, ``community create``,
``join`` and ``node run`` work on the home directly; every other command talks
to the running node through its control socket.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import re
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import anyio

from hearthnet import __version__
from hearthnet.client import Client, resolve_home
from hearthnet.errors import BadRequest, BusError, unwrap_group
from hearthnet.process_settings import tune_malloc
from hearthnet.wire.codec import value_problem

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report in one line."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def emit(args: argparse.Namespace, document: Any, human: Callable[[], None]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(_jsonable(document), ensure_ascii=False) + "\n")
    else:
        human()


MAX_JSON_DEPTH = 32
"""How deep ``--params``, ``--input`` and ``--filter`` may nest (the node takes a call's input
that deep, ``control_protocol.MAX_INPUT_DEPTH``); checked before the text is parsed."""
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def _json_deeper(text: str, limit: int) -> bool:
    """Whether JSON ``text`` opens more than ``limit`` arrays and objects inside each other.

    Counted on the text, strings blanked out, so Python's parser (which recurses once per
    level and fails with ``RecursionError`` near 1,000) never sees a deeper document.
    """
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _not_a_json_number(text: str) -> Any:
    raise BadRequest(f"{text[:40]} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _not_a_json_number(text)
    return value


def _load_json(text: str | None, what: str) -> dict[str, Any]:
    """A JSON object given on the command line; anything else is ``bad_request`` saying what."""
    if text is None:
        return {}
    if _json_deeper(text, MAX_JSON_DEPTH):
        raise BadRequest(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(text, parse_constant=_not_a_json_number, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except BadRequest as exc:
        raise BadRequest(f"{what}: {exc.message}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    problem = value_problem(value, max_depth=MAX_JSON_DEPTH)
    if problem is not None:
        raise BadRequest(f"{what}: {problem}")
    return value


def _client(args: argparse.Namespace) -> Client:
    return Client(args.home)


@contextlib.contextmanager
def _home_unused(home: Path, command: str) -> Iterator[None]:
    """Hold the home's node lock while ``command`` writes the home directly.

    A node holds the lock from the moment ``node run`` starts (seconds before its
    control socket exists), so this refuses a node that is still starting too.
    """
    try:
        lock = _lock_home(home)
    except CliError:
        raise CliError(f"stop the running node first ('{command}' writes the home directly)") from None
    try:
        yield
    finally:
        lock.close()


def event_loop_options() -> dict[str, Any]:
    """uvloop when available: it roughly halves the bus's per-call overhead."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


# -- offline commands -----------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> None:
    from hearthnet.config import CONFIG_FILE, default_config_text
    from hearthnet.identity import create_identity

    home: Path = args.home
    if (home / "identity.key").exists():
        _report_existing_home(args, home)
        return
    name = args.name if args.name is not None else _default_name(home)
    listen = args.listen if args.listen is not None else "127.0.0.1:0"
    config_text = default_config_text(name=name, listen=listen)  # checked before any file
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    identity = create_identity(home / "identity.key")
    config_path = home / CONFIG_FILE
    if not config_path.exists():
        _write_atomically(config_path, config_text)
    emit(
        args,
        {"node_id": identity.node_id, "home": str(home), "name": name, "existing": False},
        lambda: print(identity.node_id),
    )


def _default_name(home: Path) -> str:
    """The home directory's name when it is a valid node name, else ``node``."""
    from hearthnet.config import check_name

    try:
        return check_name(home.name, "the home's name")
    except BadRequest:
        return "node"


def _report_existing_home(args: argparse.Namespace, home: Path) -> None:
    """``init`` on a home that has a key: say so and show its node, changing nothing."""
    from hearthnet.config import CONFIG_FILE, load_config
    from hearthnet.identity import load_identity

    identity = load_identity(home / "identity.key")
    name = load_config(home, env={}).name  # the file's own name, not an environment override
    ignored = [flag for flag in ("--name", "--listen") if getattr(args, flag[2:]) is not None]

    def human() -> None:
        print(identity.node_id)
        note = f"{home} already holds node {name!r}; nothing was changed"
        if ignored:
            note += f" ({' and '.join(ignored)} not applied: edit {home / CONFIG_FILE})"
        print(f"hearthnet: {note}", file=sys.stderr)

    emit(args, {"node_id": identity.node_id, "home": str(home), "name": name, "existing": True}, human)


def _write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` whole or not at all: a temporary file, fsync, rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _open_log(home: Path) -> Any:
    from hearthnet.events.log import EventLog
    from hearthnet.events.rules import default_rules
    from hearthnet.node import register_service_event_rules

    rules = default_rules()
    register_service_event_rules(rules)
    return EventLog(home / "events.sqlite3", rules=rules)


def cmd_community_create(args: argparse.Namespace) -> None:
    from hearthnet.identity import load_identity

    home: Path = args.home
    identity = load_identity(home / "identity.key")
    with _home_unused(home, "community create"):
        event_log = _open_log(home)
        try:
            if event_log.community_id is not None:
                raise CliError(f"this node already belongs to community {event_log.community_id}")
            # append_local checks the event first and only then binds the log to its community
            event = event_log.append_local(
                identity, "community.created", {"name": args.name, "founder": identity.node_id}
            )
            community_id = event.community_id
        finally:
            event_log.close()
    emit(
        args,
        {
            "community_id": community_id,
            "name": args.name,
            "founder": identity.node_id,
            "event_id": event.event_id,
        },
        lambda: print(f"created community {args.name!r} ({community_id}); you are its first anchor"),
    )


def cmd_join(args: argparse.Namespace) -> None:
    from hearthnet.community.invite import decode_token
    from hearthnet.identity import load_identity

    home: Path = args.home
    identity = load_identity(home / "identity.key")
    token = decode_token(args.token.strip())
    if token.invitee != identity.node_id:
        raise CliError(f"this invite is for {token.invitee}, not for this node ({identity.node_id})")
    bootstrap = {
        "community_id": token.community_id,
        "peers": [{"node_id": token.inviter, "addresses": list(token.addresses)}],
    }
    with _home_unused(home, "join"):
        event_log = _open_log(home)
        try:
            if event_log.community_id not in (None, token.community_id):
                raise CliError(f"this node already belongs to community {event_log.community_id}")
            event_log.set_community(token.community_id)
        finally:
            event_log.close()
        _write_atomically(home / "bootstrap.json", json.dumps(bootstrap, indent=2))
    emit(
        args,
        {
            "community_id": token.community_id,
            "community_name": token.community_name,
            "level": token.level.label,
            "bootstrap": bootstrap["peers"],
        },
        lambda: print(
            f"joined {token.community_name!r} ({token.community_id}) as {token.level.label}; "
            "start the node with 'hearthnet node run'"
        ),
    )


def cmd_node_run(args: argparse.Namespace) -> None:
    # Before numpy loads: idle OpenBLAS threads busy-wait ~0.1 s after each matrix
    # product by default (measured: 4x the CPU of the work itself on a 10k-chunk exact
    # search), stealing the core the next embedding needs; 2^4 cycles, then sleep.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    tune_malloc()
    from hearthnet.config import load_config
    from hearthnet.node import Node
    from hearthnet.observability import configure_logging, shutdown_logging

    config = load_config(args.home)
    lock = _lock_home(args.home)  # held until the process exits; before the log file is opened
    configure_logging(
        config.log_level,
        log_file=config.log_path if config.log.file else None,
        max_bytes=config.log.max_bytes,
        backups=config.log.backups,
    )
    node = Node(config)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            await node.run()
            # node.run returns when its task group ends (only on cancellation)

    async def _stop_on_signal(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                scope.cancel()
                return

    try:
        anyio.run(main, backend_options=event_loop_options())
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:  # a failure at start comes out of the task group
        raise unwrap_group(group) from None
    finally:
        shutdown_logging()  # what is still queued for the log file is written before the lock goes
        lock.close()


def _lock_home(home: Path) -> Any:
    """An exclusive lock on ``home/node.lock``: a second ``node run`` on the same home would
    share its event log and replace its control socket."""
    import fcntl

    home.mkdir(parents=True, exist_ok=True)
    fh = (home / "node.lock").open("a+", encoding="ascii")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise CliError(f"a node is already running for {home} (process {holder}); stop it first") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


# -- commands through the running node ---------------------------------------------------
def cmd_status(args: argparse.Namespace) -> None:
    from hearthnet.cli_data import shown

    result = _client(args).call("node.status")
    st = result.output

    def human() -> None:
        print(f"node       {st['node_id']} ({st.get('name', '')})")
        if st.get("community_id") is None:
            print(
                "community  none: found one with 'hearthnet community create NAME' "
                "or join one with 'hearthnet join TOKEN'"
            )
        else:
            print(f"community  {st.get('community_name') or '-'} ({st['community_id']})")
        revoked = st.get("revoked")
        if revoked:
            why = f" ({shown(revoked['reason'])})" if revoked.get("reason") else ""
            print(f"level      revoked by {revoked['by']} at {revoked['at']}{why}")
        else:
            print(f"level      {st.get('level') or '-'}")
        print(f"listening  {', '.join(st.get('addresses', [])) or '-'}")
        print(f"peers      {len(st.get('peers', []))}")
        for p in st.get("peers", []):
            heard = f"  heard {p['last_heard_s']:g} s ago" if "last_heard_s" in p else ""
            level = p.get("level") or "?"
            print(f"  {p['node_id']}  {level:8} {p.get('address', '')}  {p.get('name', '')}{heard}")
        print("capabilities")
        for c in st.get("capabilities", []):
            where = "local" if c.get("local") else c["node"]
            params = json.dumps(c.get("params", {}), ensure_ascii=False)
            print(f"  {c['capability']:24} {params:40} {where}")

    emit(args, st, human)


def cmd_call(args: argparse.Namespace) -> None:
    params = _load_json(args.params, "--params")
    inp = _load_json(args.input, "--input")
    result = _client(args).call(args.capability, params, inp, timeout=args.timeout, provider=args.provider)
    document = {"output": result.output, "meta": result.meta, "provider": result.provider}
    emit(args, document, lambda: print(json.dumps(_jsonable(document), indent=2, ensure_ascii=False)))


EVENTS_PAGE = 1000
"""Events asked for per ``events.list`` call by ``hearthnet events``."""


def cmd_events(args: argparse.Namespace) -> None:
    from hearthnet.cli_data import shown

    client = _client(args)
    events: list[dict[str, Any]] = []
    after: Any = None
    while True:  # page by page: a long-lived community's log does not fit one answer
        page = client.call("events.list", input={"limit": EVENTS_PAGE, "after": after}).output
        batch = page.get("events", [])
        if args.json:
            events.extend(batch)
        else:
            for e in batch:
                ignored = "" if e.get("effective", True) else "  (no effect)"
                data = shown(json.dumps(e.get("data", {}), ensure_ascii=False)[:100])
                print(
                    f"{e['lamport']:>6}  {e['event_id']}  {shown(str(e['event_type'])):24} "
                    f"{e['author'][:20]}…  {data}{ignored}"
                )
        after = page.get("next")
        if after is None or not batch:
            break
    if args.json:
        emit(args, {"events": events}, lambda: None)


def cmd_invite(args: argparse.Namespace) -> None:
    result = _client(args).call("community.invite", input={"node_id": args.node_id, "level": args.level})
    token = result.output["token"]
    emit(args, result.output, lambda: print(token))


def cmd_member(args: argparse.Namespace) -> None:
    if args.action in ("promote", "demote"):
        result = _client(args).call(
            f"member.{args.action}", input={"node_id": args.node_id, "level": args.level}
        )
        emit(args, result.output, lambda: print(f"{args.node_id} is now {result.output['level']}"))
    else:
        result = _client(args).call(
            "member.revoke", input={"node_id": args.node_id, "reason": args.reason or ""}
        )
        emit(args, result.output, lambda: print(f"{args.node_id} revoked"))


# -- parser ---------------------------------------------------------------------------
DESCRIPTION = """\
A HearthNet node and its command line.

'init', 'community create', 'join' and 'node run' work on the home directly;
every other command talks to the running node through its control socket.
Every command takes --home DIR and --json; a failure exits non-zero with one
line 'hearthnet: ...' on stderr."""

LEVELS = ["member", "trusted", "anchor"]


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr, like every other failure (exit 2).

    Sub-command parsers are made of the same class (``add_subparsers`` uses the parent's).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"hearthnet: {_one_line(message)} (see '{self.prog} --help')\n")


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters as ``\\uXXXX``: a failure is one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


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

    p = sub.add_parser("init", parents=[common], help="create a node home with identity and config")
    p.add_argument("--name", help="1-64 printable characters, shown to every peer (default: the home's name)")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to listen on (default: 127.0.0.1:0; port 0 takes any free port)",
    )
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("community", parents=[common], help="found a community")
    csub = p.add_subparsers(dest="community_command", required=True, metavar="ACTION")
    pc = csub.add_parser(
        "create", parents=[common], help="this node founds a community and is its first anchor"
    )
    pc.add_argument("name", help="the community's name (1-128 characters)")
    pc.set_defaults(func=cmd_community_create)

    p = sub.add_parser("invite", parents=[common], help="invite a node id; prints a one-line token")
    p.add_argument("node_id", help="the invitee's node id, printed by its 'hearthnet init'")
    p.add_argument(
        "--level",
        choices=LEVELS,
        default="member",
        help="the invitee's trust level; a trusted member invites members only (default: %(default)s)",
    )
    p.set_defaults(func=cmd_invite)

    p = sub.add_parser(
        "join", parents=[common], help="store the community and bootstrap peer of an invite token"
    )
    p.add_argument("token", help="the token printed by 'hearthnet invite' on a member's node")
    p.set_defaults(func=cmd_join)

    p = sub.add_parser("node", parents=[common], help="run the node")
    nsub = p.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    pr = nsub.add_parser("run", parents=[common], help="run in the foreground until SIGINT/SIGTERM")
    pr.set_defaults(func=cmd_node_run)

    p = sub.add_parser("status", parents=[common], help="node, community, peers and capabilities")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("call", parents=[common], help="call a capability through this node's bus")
    p.add_argument("capability", help="NAME or NAME@X.Y, e.g. node.ping or rag.query@1.0")
    p.add_argument(
        "--params",
        metavar="JSON",
        help='JSON object of the parameters that choose a provider, e.g. {"corpus": "family"} (default: {})',
    )
    p.add_argument(
        "--input", metavar="JSON", help='JSON object the capability works on, e.g. {"k": 5} (default: {})'
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="deadline of the call (default: the capability's own deadline)",
    )
    p.add_argument(
        "--provider", metavar="NODE_ID", help="node that must serve the call (default: the bus chooses)"
    )
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("events", parents=[common], help="the local event log in replay order")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser(
        "member", parents=[common], help="raise (promote) or lower (demote) a member's level, or revoke it"
    )
    msub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    pm = msub.add_parser("promote", parents=[common], help="raise a member's trust level (anchors only)")
    pm.add_argument("node_id", help="the member's node id")
    pm.add_argument(
        "--level", choices=LEVELS, default="trusted", help="the higher level (default: %(default)s)"
    )
    pm.set_defaults(func=cmd_member)
    pm = msub.add_parser(
        "demote", parents=[common], help="lower a member's trust level (anchors only; not the founder)"
    )
    pm.add_argument("node_id", help="the member's node id")
    pm.add_argument("--level", choices=LEVELS[:2], required=True, help="the lower level (required)")
    pm.set_defaults(func=cmd_member)
    pm = msub.add_parser(
        "revoke", parents=[common], help="remove a member for good (anchors only; not the founder)"
    )
    pm.add_argument("node_id", help="the member's node id")
    pm.add_argument(
        "--reason", help="why, kept in the signed revocation event; up to 1000 characters (default: none)"
    )
    pm.set_defaults(func=cmd_member)

    for register in _extra_commands():
        register(sub, common)
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


def _extra_commands() -> list[Callable[[Any, argparse.ArgumentParser], None]]:
    from hearthnet.cli_ask import register_ask_commands
    from hearthnet.cli_data import register_data_commands
    from hearthnet.cli_llm import register_llm_commands
    from hearthnet.cli_logs import register_logs_command
    from hearthnet.cli_mcp import register_mcp_command
    from hearthnet.cli_ui import register_ui_commands

    return [
        register_data_commands,
        register_logs_command,
        register_llm_commands,
        register_ask_commands,
        register_ui_commands,
        register_mcp_command,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    try:
        args.home = resolve_home(getattr(args, "home", None))  # '~nobody/x' fails here
        args.func(args)
    except BaseException as exc:  # every failure is one line: never a traceback
        return _report(exc, getattr(args, "home", None))
    return 0


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
    print(f"hearthnet: {_one_line(line)}", file=sys.stderr)
    return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE


if __name__ == "__main__":
    # Run as ``python -m hearthnet.cli`` this file is ``__main__``, and the command modules that
    # import ``hearthnet.cli`` get a second copy whose ``CliError`` this ``main`` would not catch
    # (a traceback instead of a one-line reason): run the one copy everything else imports.
    from hearthnet.cli import main as _main

    sys.exit(_main())


__all__ = ["BadRequest", "build_parser", "main"]
