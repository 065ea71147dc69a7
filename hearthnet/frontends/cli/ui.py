"""CLI commands of the web UI: ``ui`` (the running node's URL with a one-time owner link) and
``ui token create|list|revoke`` (a person's own login link, with a level).

Tokens live in ``<home>/ui.sqlite3``, which these commands open directly: a person's token can
be made, listed or revoked whether or not the node runs (a running node sees the change on the
next request).
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.contracts.node import NodeClient
from hearthnet.frontends.cli.output import CliError, emit, shown
from hearthnet.frontends.client.client import Client, no_home


def _store(home: Path) -> Any:
    from hearthnet.frontends.http.tokens import TokenStore

    missing = no_home(home)
    if missing is not None:
        raise missing
    return TokenStore(home / "ui.sqlite3")


def _running_url(home: Path) -> str:
    """The running node's UI address; ``CliError`` if the node is not running or has no UI."""
    from hearthnet.config import load_config
    from hearthnet.frontends.http.server import read_ui_state

    config = load_config(home)
    if not config.ui.enabled:
        raise CliError("the web UI is turned off ([ui] enabled = false, or HEARTHNET_UI=0)")
    Client(home).run(lambda c: NodeClient(c).info(timeout=10))  # the node runs (else: partition, one line)
    state = read_ui_state(config.ui_state_path)
    if state is None or state.get("pid") != _node_pid(home) or not isinstance(state.get("url"), str):
        raise CliError("the running node has not started its web UI (see its log)")
    return str(state["url"])


def _node_pid(home: Path) -> int | None:
    try:
        text = (home / "node.lock").read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _link_url(home: Path) -> tuple[str, bool]:
    """The URL for a person's link: the running UI's, else the one it last had (or will have)."""
    from hearthnet.config import load_config
    from hearthnet.frontends.http.server import read_ui_state, ui_url

    try:
        return _running_url(home), True
    except CliError:
        pass
    except Exception:  # the node is not running: a link can still be made
        pass
    config = load_config(home)
    state = read_ui_state(config.ui_state_path)
    if state is not None and isinstance(state.get("url"), str):
        return str(state["url"]), False
    return ui_url(config.ui.listen_host, config.ui.listen_port), False


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def cmd_ui(args: argparse.Namespace) -> None:
    from hearthnet.frontends.http.standing import standing_of

    url = _running_url(args.home)
    standing = standing_of(Client(args.home).run(lambda c: NodeClient(c).info(timeout=10)))
    store = _store(args.home)
    try:
        token, secret = store.create("owner", Level.ANCHOR, owner=True)
    finally:
        store.close()
    link = f"{url}/login#{secret}"
    if args.open:
        import webbrowser

        webbrowser.open(link)

    def human() -> None:
        print(f"{url}\n\nSign in (works once, for 15 minutes):\n{link}")
        if standing.revoked:
            print(f"\nNote: {standing.revoked}; the UI shows only what it holds.")
        elif standing.level < Level.ANCHOR:
            print(
                f"\nYou act as {standing.level.label}: this node is a {standing.level.label} of its "
                "community (an anchor can promote it)."
            )

    emit(
        args,
        {
            "url": url,
            "link": link,
            "expires": token.expires,
            "level": standing.level.label,
            "revoked": standing.revoked,
        },
        human,
    )


def cmd_token_create(args: argparse.Namespace) -> None:
    store = _store(args.home)
    try:
        token, secret = store.create(args.name, Level.parse(args.level))
    finally:
        store.close()
    url, running = _link_url(args.home)
    link = f"{url}/login#{secret}"
    note = "" if running else "  (the node is not running: the link works once it is)"
    emit(
        args,
        {**token.to_json(), "token": secret, "link": link},
        lambda: print(
            f"{token.id}  {token.name}  {token.level.label}\n{link}{note}\n\n"
            f"API key (OpenAI-compatible gateway /v1, MCP /mcp): {secret}"
        ),
    )


def cmd_token_list(args: argparse.Namespace) -> None:
    store = _store(args.home)
    try:
        store.prune()
        now = time.time()
        tokens = [t for t in store.list() if args.all or (t.revoked is None and not t.spent(now))]
    finally:
        store.close()

    def human() -> None:
        if not tokens:
            print("(no tokens: 'hearthnet ui token create --name NAME --level member')")
        for t in tokens:
            kind = "owner link" if t.owner else t.level.label
            state = "revoked" if t.revoked else ("used" if t.owner and t.used else "")
            if t.owner and not state:
                state = "expired" if t.spent(now) else f"unused, valid until {_when(t.expires)}"
            print(
                f"{t.id}  {shown(t.name)[:24]:24} {kind:10} created {_when(t.created)}  "
                f"last used {_when(t.last_used)}  {state}".rstrip()
            )

    emit(args, {"tokens": [t.to_json() for t in tokens]}, human)


def cmd_token_revoke(args: argparse.Namespace) -> None:
    store = _store(args.home)
    try:
        token = store.revoke(args.token)
    finally:
        store.close()
    emit(
        args,
        token.to_json(),
        lambda: print(f"revoked {token.id} ({token.name}); its sessions are signed out"),
    )


def add_ui(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ui", parents=[common], help="the web UI: its address and a one-time sign-in link")
    p.add_argument(
        "--open",
        action="store_true",
        help="open the link in this computer's browser (default: off, only print it)",
    )
    p.set_defaults(func=cmd_ui)
    usub = p.add_subparsers(dest="ui_command")
    t = usub.add_parser("token", parents=[common], help="personal sign-in links")
    tsub = t.add_subparsers(dest="token_command", required=True)
    c = tsub.add_parser("create", parents=[common], help="a person's own link (reusable until revoked)")
    c.add_argument(
        "--name", required=True, help="the person the link is for, shown in 'ui token list' (required)"
    )
    c.add_argument(
        "--level",
        choices=["member", "trusted"],
        default="member",
        help="what the link may do: member asks and reads, trusted also adds and deletes "
        "(default: %(default)s)",
    )
    c.set_defaults(func=cmd_token_create)
    ls = tsub.add_parser("list", parents=[common], help="tokens and when they were last used")
    ls.add_argument(
        "--all",
        action="store_true",
        help="include revoked tokens and used owner links whose browsers are still signed in "
        "(default: off: the tokens that can sign someone in)",
    )
    ls.set_defaults(func=cmd_token_list)
    r = tsub.add_parser(
        "revoke", parents=[common], help="revoke a token by id or name; signs its sessions out"
    )
    r.add_argument(
        "token", metavar="ID_OR_NAME", help="the token's id or name, as 'ui token list' shows them"
    )
    r.set_defaults(func=cmd_token_revoke)


__all__ = ["add_ui"]
