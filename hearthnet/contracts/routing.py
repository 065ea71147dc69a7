"""Each capability family's params rules, which the node gives its bus at start: how a remote
provider's advertised params fit a call (where it is not every requested key equal) and which
of the providers that fit is tried first.  The bus itself knows no capability name."""

from __future__ import annotations

from typing import Protocol

from hearthnet.bus.descriptors import ParamsPredicate
from hearthnet.bus.router import Preference
from hearthnet.contracts import llm, rag, rerank

__all__ = ["install"]


class _RuleTaker(Protocol):
    def register_predicate(self, capability: str, predicate: ParamsPredicate) -> None: ...

    def register_preference(self, capability: str, preference: Preference) -> None: ...


def install(bus: _RuleTaker) -> None:
    """Give ``bus`` the remote-provider rules of every family."""
    for capability, predicate in {**rag.PREDICATES, **llm.PREDICATES, **rerank.PREDICATES}.items():
        bus.register_predicate(capability, predicate)
    for capability, preference in rag.PREFERENCES.items():
        bus.register_preference(capability, preference)
