"""``hearthnet doctor``: what stands between this node and its community, in plain words.

Prints one line per finding (ok, note, PROBLEM) with a fix under each problem or note that has
one; ``--json`` gives the findings and the facts behind them.  Exits 1 when a problem blocks
normal use (the node not running, no community, a port nothing listens on or a firewall drops,
peers that cannot connect back, no member reachable, clocks too far apart, no embedder).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from hearthnet.frontends.cli.diagnosis import Diagnosis, diagnose
from hearthnet.frontends.cli.output import EXIT_FAILURE, emit, one_line, plural, shown

__all__ = ["add_doctor"]

_LABEL = {"ok": "ok", "note": "note", "problem": "PROBLEM"}


def _human(d: Diagnosis) -> None:
    node = d.facts.get("node") or {}
    if node:
        print(f"hearthnet doctor: {shown(str(node.get('name') or ''))} ({node.get('node_id')})")
    for f in d.findings:
        print(f"{_LABEL[f.level]:8} {f.check:10} {shown(f.message)}")
        if f.hint and f.level != "ok":
            print(f"{'':8} {'':10} fix: {shown(f.hint)}")
    problems = len(d.problems)
    if problems:
        print(f"\n{problems} problem{'s' if problems > 1 else ''} in the way of normal use.")
    else:
        print("\nNothing in the way of normal use.")


def cmd_doctor(args: argparse.Namespace) -> None:
    diagnosis = anyio.run(diagnose, args.home)
    emit(args, diagnosis.to_json(), lambda: _human(diagnosis))
    problems = diagnosis.problems
    if problems:  # a failing command says why on one line of stderr, as every command does
        more = f" (and {plural(len(problems) - 1, 'more problem')})" if len(problems) > 1 else ""
        print(f"hearthnet: {one_line(problems[0].message)}{more}", file=sys.stderr)
        raise SystemExit(EXIT_FAILURE)


def add_doctor(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="what stands between this node and its community: addresses, port, peers, clocks, "
        "models; exits 1 when something blocks normal use",
    )
    p.set_defaults(func=cmd_doctor)
