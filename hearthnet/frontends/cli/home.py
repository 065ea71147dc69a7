"""Commands that work on the home directly, with no node running: ``init``, ``community create``,
``join`` and ``node run`` (which starts the node and holds the home's lock while it runs)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from hearthnet.community.membership import CREATED
from hearthnet.errors import BadRequest, unwrap_group
from hearthnet.frontends.cli.output import CliError, emit
from hearthnet.frontends.client.client import no_home
from hearthnet.runtime.process_settings import event_loop_options, raise_open_files_limit, tune_malloc

__all__ = ["add_community", "add_init", "add_join", "add_node", "write_atomically"]


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


def write_atomically(path: Path, text: str) -> None:
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


def _identity(home: Path) -> Any:
    """The identity of the node of ``home``; ``not_found`` saying how to create the home if none."""
    from hearthnet.identity import load_identity

    missing = no_home(home)
    if missing is not None:
        raise missing
    return load_identity(home / "identity.key")


# -- init -----------------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> None:
    from hearthnet.config import CONFIG_FILE, default_config_text
    from hearthnet.identity import create_identity

    home: Path = args.home
    if (home / "identity.key").exists():
        _report_existing_home(args, home)
        return
    name = args.name if args.name is not None else _default_name(home)
    listen = args.listen if args.listen is not None else "127.0.0.1:0"
    advertise = args.advertise or []
    config_text = default_config_text(name=name, listen=listen, advertise=advertise)  # checked first
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    identity = create_identity(home / "identity.key")
    config_path = home / CONFIG_FILE
    if not config_path.exists():
        write_atomically(config_path, config_text)
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
    ignored = [flag for flag in ("--name", "--listen", "--advertise") if getattr(args, flag[2:]) is not None]

    def human() -> None:
        print(identity.node_id)
        note = f"{home} already holds node {name!r}; nothing was changed"
        if ignored:
            note += f" ({' and '.join(ignored)} not applied: edit {home / CONFIG_FILE})"
        print(f"hearthnet: {note}", file=sys.stderr)

    emit(args, {"node_id": identity.node_id, "home": str(home), "name": name, "existing": True}, human)


# -- community create, join ------------------------------------------------------------------
def _open_log(home: Path) -> Any:
    from hearthnet.contracts.events import community_rules
    from hearthnet.events.log import EventLog

    return EventLog(home / "events.sqlite3", rules=community_rules())


def cmd_community_create(args: argparse.Namespace) -> None:
    home: Path = args.home
    identity = _identity(home)
    with _home_unused(home, "community create"):
        event_log = _open_log(home)
        try:
            if event_log.community_id is not None:
                raise CliError(f"this node already belongs to community {event_log.community_id}")
            # append_local checks the event first and only then binds the log to its community
            event = event_log.append_local(
                identity, CREATED, {"name": args.name, "founder": identity.node_id}
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

    home: Path = args.home
    identity = _identity(home)
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
        write_atomically(home / "bootstrap.json", json.dumps(bootstrap, indent=2))
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


# -- node run -------------------------------------------------------------------------------
def cmd_node_run(args: argparse.Namespace) -> None:
    missing = no_home(args.home)
    if missing is not None:  # before anything is written: a mistyped --home stays uncreated
        raise missing
    # Before numpy loads: idle OpenBLAS threads busy-wait after each matrix product by default,
    # stealing the core the next embedding needs (specs/node.md); 2^4 cycles, then sleep.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    tune_malloc()
    raise_open_files_limit()  # before any socket: the HTTP server's caps are read from it
    from hearthnet.answer.hosting import answer_service
    from hearthnet.config import load_config
    from hearthnet.frontends.doors import front_door_factories
    from hearthnet.node import Node, default_service_factories
    from hearthnet.runtime.observability import configure_logging, shutdown_logging

    config = load_config(args.home)
    lock = _lock_home(args.home)  # held until the process exits; before the log file is opened
    configure_logging(
        config.log_level,
        log_file=config.log_path if config.log.file else None,
        max_bytes=config.log.max_bytes,
        backups=config.log.backups,
    )
    # the composer and the front doors sit above the node's services: given to it from here
    node = Node(
        config,
        factories=[*default_service_factories(), answer_service],
        front_doors=front_door_factories(),
    )

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


# -- parser ---------------------------------------------------------------------------------
def add_init(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", parents=[common], help="create a node home with identity and config")
    p.add_argument("--name", help="1-64 printable characters, shown to every peer (default: the home's name)")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to listen on (default: 127.0.0.1:0; port 0 takes any free port)",
    )
    p.add_argument(
        "--advertise",
        metavar="HOST[:PORT]",
        action="append",
        help="an address peers dial instead of this device's interfaces, e.g. a VPN address "
        "(repeatable; default port: the one listened on; default: every interface's address)",
    )
    p.set_defaults(func=cmd_init)


def add_community(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("community", parents=[common], help="found a community")
    csub = p.add_subparsers(dest="community_command", required=True, metavar="ACTION")
    pc = csub.add_parser(
        "create", parents=[common], help="this node founds a community and is its first anchor"
    )
    pc.add_argument("name", help="the community's name (1-128 characters)")
    pc.set_defaults(func=cmd_community_create)


def add_join(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "join", parents=[common], help="store the community and bootstrap peer of an invite token"
    )
    p.add_argument("token", help="the token printed by 'hearthnet invite' on a member's node")
    p.set_defaults(func=cmd_join)


def add_node(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("node", parents=[common], help="run the node")
    nsub = p.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    pr = nsub.add_parser("run", parents=[common], help="run in the foreground until SIGINT/SIGTERM")
    pr.set_defaults(func=cmd_node_run)
