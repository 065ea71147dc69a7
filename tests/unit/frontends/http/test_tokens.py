"""The web UI's token store and its allow-list, without a node."""

from __future__ import annotations

import ast
import os
import re
import stat
from pathlib import Path

import pytest

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, NotFound, Unauthorized
from hearthnet.frontends.http import policy
from hearthnet.frontends.http.security import allowed_names, cookie_value, host_allowed
from hearthnet.frontends.http.tokens import OWNER_LINK_SECONDS, TokenStore, digest

HTTP = Path(policy.__file__).resolve().parent


@pytest.fixture
def store(tmp_path: Path) -> TokenStore:
    s = TokenStore(tmp_path / "ui.sqlite3")
    yield s
    s.close()


def test_the_file_is_private_and_holds_no_secret(store: TokenStore, tmp_path: Path) -> None:
    _, secret = store.create("Ana", Level.MEMBER)
    redeemed = store.redeem(secret)
    assert redeemed is not None
    _, cookie = redeemed
    data = (tmp_path / "ui.sqlite3").read_bytes()
    assert stat.S_IMODE(os.stat(tmp_path / "ui.sqlite3").st_mode) == 0o600
    assert secret.encode() not in data and cookie.encode() not in data
    assert digest(secret).encode() in data


def test_an_owner_link_works_once_and_expires(store: TokenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    token, secret = store.create("owner", Level.ANCHOR, owner=True)
    assert token.owner and token.level is Level.ANCHOR
    first = store.redeem(secret)
    assert first is not None and first[0].owner and first[0].level is Level.ANCHOR
    assert store.redeem(secret) is None
    _, unused = store.create("owner", Level.ANCHOR, owner=True)
    import hearthnet.frontends.http.tokens as tokens

    now = tokens.time.time()
    monkeypatch.setattr(tokens.time, "time", lambda: now + OWNER_LINK_SECONDS + 1)
    assert store.redeem(unused) is None


def test_a_person_token_is_reusable_until_revoked_and_revoking_ends_its_sessions(store: TokenStore) -> None:
    token, secret = store.create("Ana", Level.TRUSTED)
    one, two = store.redeem(secret), store.redeem(secret)
    assert one is not None and two is not None
    assert {one[0].key, two[0].key} <= set(store.sessions())
    before = store.change_counter()
    store.revoke("Ana")
    assert store.change_counter() != before  # a cache in another process learns of it
    assert not set(store.sessions()) & {one[0].key, two[0].key}
    assert store.redeem(secret) is None
    with pytest.raises(NotFound):
        store.revoke(token.id)


def test_only_the_owner_is_anchor_and_names_are_checked(store: TokenStore) -> None:
    with pytest.raises(BadRequest, match="only the node's owner"):
        store.create("Boss", Level.ANCHOR)
    store.create("Ana", Level.MEMBER)
    with pytest.raises(BadRequest, match="exists"):
        store.create("Ana", Level.TRUSTED)
    for bad in ("", "  ", "x" * 65, "tab\there"):
        with pytest.raises(BadRequest):
            store.create(bad, Level.MEMBER)


CONTRACTS = HTTP.parents[1] / "contracts"


def client_capabilities() -> dict[str, set[str]]:
    """``Client.method`` and module-level ``function`` of the contracts -> the capability names
    they call (the contracts' name constants they use)."""
    out: dict[str, set[str]] = {}
    for path in CONTRACTS.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {
            t.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and re.fullmatch(r"[a-z]+\.[a-z_.]+", node.value.value)
            for t in node.targets
            if isinstance(t, ast.Name)
        }

        def used(fn: ast.AST, names: dict[str, str] = names) -> set[str]:
            return {names[n.id] for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in names}

        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Client"):
                methods = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
                for fn in methods:
                    # with the methods it calls on ``self`` (``ingest`` runs ``ingesting``)
                    on_self = {
                        n.attr
                        for n in ast.walk(fn)
                        if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name)
                        and n.value.id == "self"
                    }
                    out[f"{node.name}.{fn.name}"] = used(fn).union(
                        *(used(f) for f in methods if f.name in on_self)
                    )
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and used(node):
                out[node.name] = used(node)
    return out


_CONTAINER_METHODS = frozenset(dir(dict) + dir(list) + dir(set))
"""``x.update(...)`` on a dict is not ``RagClient.update``: such names are never taken as a client's."""


def door_calls(path: Path, clients: dict[str, set[str]]) -> set[str]:
    """The capabilities ``path`` calls through the contracts' typed clients: ``XClient(..).m(..)``,
    ``v.m(..)`` where ``v = XClient(..)`` in the same function, ``x.m(..)`` where ``m`` is a
    method of one client only, and the contracts' functions."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    methods: dict[str, list[str]] = {}
    for ref in clients:
        if "." in ref:
            methods.setdefault(ref.split(".")[1], []).append(ref)
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        bound = {
            t.id: n.value.func.id
            for n in ast.walk(fn)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name)
            and n.value.func.id.endswith("Client")
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for n in ast.walk(fn):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Name):
                found |= clients.get(f.id, set())
            elif isinstance(f, ast.Attribute):
                owner = f.value
                if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name):
                    found |= clients.get(f"{owner.func.id}.{f.attr}", set())
                elif isinstance(owner, ast.Name) and owner.id in bound:
                    found |= clients.get(f"{bound[owner.id]}.{f.attr}", set())
                elif len(methods.get(f.attr, [])) == 1 and f.attr not in _CONTAINER_METHODS:
                    # a method of one client only (not dict.update or list.append): that one's
                    found |= clients[methods[f.attr][0]]
    return found


def test_every_capability_the_ui_calls_is_on_the_allow_list() -> None:
    """The web UI, the gateway and the MCP tools (which HTTP callers reach through the gated bus),
    and the client policy and ingest flow they share: every capability their typed-client calls
    reach is on the allow-list (else the call would be refused at run time)."""
    clients = client_capabilities()
    assert clients["RagClient.query"] == {"rag.query"} and clients["embed_texts"] == {"embed.text"}
    front = HTTP.parent
    called: set[str] = set()
    doors = [*HTTP.glob("*.py"), *(front / "mcp").glob("*.py"), front / "client" / "corpora.py"]
    for path in [*doors, front / "client" / "ingest.py", front / "client" / "search.py"]:
        called |= door_calls(path, clients)
    assert {"answer.ask", "rag.ingest", "file.read", "llm.chat", "member.revoke"} <= called, called
    assert called <= set(policy.CAPABILITY_LEVELS), called - set(policy.CAPABILITY_LEVELS)


def test_the_allow_list_keeps_writes_from_members_and_the_community_from_all_but_anchors() -> None:
    writes = {"file.import", "file.push", "rag.ingest", "rag.delete"}
    community = {"community.invite", "member.promote", "member.demote", "member.revoke"}
    owners = {"rag.watch"}  # folders on the node's own disk: its owner's
    for capability, level in policy.CAPABILITY_LEVELS.items():
        if capability in writes:
            assert level is Level.TRUSTED, capability
        elif capability in community | owners:
            assert level is Level.ANCHOR, capability
        elif capability.startswith("answer."):
            assert level is Level.MEMBER, capability  # a person's own chats (the UI scopes them)
        else:
            assert level is Level.MEMBER and not re.search(r"ingest|delete|invite|promote|revoke", capability)
    with pytest.raises(Unauthorized, match="needs a trusted login"):
        policy.check(Level.MEMBER, "rag.ingest")
    with pytest.raises(Unauthorized, match="needs an anchor login"):
        policy.check(Level.TRUSTED, "member.promote")
    with pytest.raises(Unauthorized, match="does not call"):
        policy.check(Level.ANCHOR, "rag.reindex")  # not listed: never, whatever the level
    policy.check(Level.MEMBER, "rag.query")


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:7780", True),
        ("localhost:7780", True),
        ("LOCALHOST:7780", True),
        ("[::1]:7780", True),
        ("hearth.lan:7780", True),
        ("192.168.1.5:7780", False),  # loopback listen: no other address names it
        ("evil.example:7780", False),
        ("127.0.0.1:7781", False),
        ("127.0.0.1", False),
        ("::1:7780", False),
        ("[::1", False),
        ("", False),
    ],
)
def test_host_header_names_this_ui_or_is_refused(host: str, ok: bool) -> None:
    names, any_ip = allowed_names("127.0.0.1", ["hearth.lan"])
    assert host_allowed(host, 7780, names, any_ip=any_ip) is ok


def test_listening_on_every_interface_any_ip_address_but_no_foreign_name_will_do() -> None:
    names, any_ip = allowed_names("0.0.0.0", [])
    assert any_ip
    assert host_allowed("192.168.1.5:7780", 7780, names, any_ip=any_ip)
    assert host_allowed("[fe80::1]:7780", 7780, names, any_ip=any_ip)
    assert not host_allowed("rebind.example:7780", 7780, names, any_ip=any_ip)


def test_cookie_value_is_read_by_name() -> None:
    assert cookie_value("a=1; hn_session=xyz; b=2") == "xyz"
    assert cookie_value("hn_session_other=1") is None
    assert cookie_value("") is None


def test_spent_owner_links_are_pruned_unless_a_browser_still_uses_them(
    store: TokenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hearthnet.frontends.http.tokens as tokens

    used, secret = store.create("owner", Level.ANCHOR, owner=True)
    assert store.redeem(secret) is not None
    expired, _ = store.create("owner", Level.ANCHOR, owner=True)
    now = tokens.time.time()
    monkeypatch.setattr(tokens.time, "time", lambda: now + OWNER_LINK_SECONDS + 1)
    later = now + OWNER_LINK_SECONDS + 1
    store.prune()
    left = {t.id: t for t in store.list()}
    assert expired.id not in left  # never used, expired: gone from the store
    assert used.id in left and left[used.id].spent(later)  # its browser is still signed in
    fresh, _ = store.create("owner", Level.ANCHOR, owner=True)
    assert not store._get(fresh.id).spent(later)


def test_a_login_acts_with_at_most_the_nodes_own_level() -> None:
    from hearthnet.frontends.http.standing import standing_of

    assert standing_of({"community_id": "c", "level": "member", "revoked": None}).level is Level.MEMBER
    assert standing_of({"community_id": "c", "level": "anchor", "revoked": None}).level is Level.ANCHOR
    assert standing_of({"community_id": None, "level": None, "revoked": None}).level is Level.ANCHOR
    revoked = standing_of({"community_id": "c", "level": None, "revoked": {"by": "ed25519:x", "at": "T"}})
    assert revoked.level is Level.MEMBER
    assert revoked.revoked == (
        "this node was revoked from the community by ed25519:x at T: it can no longer reach other members"
    )
