"""Commands that change the community through the running node: ``invite`` and ``member
promote|demote|revoke`` (``community create`` and ``join`` work on the home: :mod:`.home`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable
from typing import Any

from hearthnet.contracts.node import NodeClient
from hearthnet.frontends.cli.output import emit
from hearthnet.frontends.client.client import AsyncClient, Client

__all__ = ["LEVELS", "add_invite", "add_member"]

LEVELS = ["member", "trusted", "anchor"]


def cmd_invite(args: argparse.Namespace) -> None:
    output = Client(args.home).run(lambda c: NodeClient(c).invite(args.node_id, args.level))
    token = output["token"]

    def human() -> None:
        print(token)
        if output.get("reissued"):
            print(
                f"hearthnet: {args.node_id} is a member already ({output['level']}): this is a "
                "fresh token for it; its invitation stands, nothing new was signed",
                file=sys.stderr,
            )

    emit(args, output, human)


def cmd_member(args: argparse.Namespace) -> None:
    if args.action in ("promote", "demote"):

        def change(c: AsyncClient) -> Awaitable[dict[str, Any]]:
            nodes = NodeClient(c)
            return (nodes.promote if args.action == "promote" else nodes.demote)(args.node_id, args.level)

        changed = Client(args.home).run(change)
        emit(args, changed, lambda: print(f"{args.node_id} is now {changed['level']}"))
    else:
        revoked = Client(args.home).run(lambda c: NodeClient(c).revoke(args.node_id, args.reason or ""))
        emit(args, revoked, lambda: print(f"{args.node_id} revoked"))


def add_invite(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "invite",
        parents=[common],
        help="invite a node id; prints a one-line token (again for a member that lost its token)",
    )
    p.add_argument("node_id", help="the invitee's node id, printed by its 'hearthnet init'")
    p.add_argument(
        "--level",
        choices=LEVELS,
        default="member",
        help="the invitee's trust level; a trusted member invites members only (default: %(default)s)",
    )
    p.set_defaults(func=cmd_invite)


def add_member(sub: Any, common: argparse.ArgumentParser) -> None:
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
