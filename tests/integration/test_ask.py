"""``hearthnet ask`` on four real node processes over TCP.

The heating handbook is corpus ``heating`` on node 1, the solar and battery
notes corpus ``energy`` on node 2, ``llm.chat`` runs on node 3 (its
``[[llm.openai]]`` points at a real OpenAI-compatible server on 127.0.0.1 in
this process), and node 4, with neither documents, embedder nor model, asks.
Pages are checked against the PDFs themselves (pypdf), not against what the
node says.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pypdf import PdfReader

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.openai_chat_server import OpenAIChatServer

DEMO = Path(__file__).resolve().parents[2] / "hearthnet" / "demo"
MODEL = "test-chat"
HEATING, ENERGY = DEMO / "heating_handbook.pdf", DEMO / "solar_and_battery.pdf"
TWO_PART = (
    "At what temperature is the hall thermostat set at night, and when does the home battery "
    "charge from the grid in winter?"
)
BOILER = "When is the boiler serviced?"
BOILER_SENTENCE = (
    "It is serviced every year in early October by a registered engineer, before the cold season."
)


def page_of(pdf: Path, phrase: str) -> int:
    """The 1-based page of ``pdf`` whose text holds ``phrase`` (whitespace folded)."""
    pages = [" ".join((p.extract_text() or "").split()) for p in PdfReader(str(pdf)).pages]
    found = [i for i, text in enumerate(pages, start=1) if phrase in text]
    assert len(found) == 1, (pdf.name, phrase, found)
    return found[0]


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh_server(server: OpenAIChatServer) -> None:
    server.mode, server.reply, server.hold_after, server.cite_each_file = "normal", None, None, True
    server.release.clear()
    server.disconnected.clear()
    server.disconnects = 0


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, server: OpenAIChatServer) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("ask"))
    bare = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}
    try:
        hearth = m.add("hearth")
        pantry = m.add("pantry")
        den = m.add("den", env=bare)
        with (den.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
                "context_tokens = 4096\nmax_output_tokens = 256\n"
            )
        laptop = m.add("laptop", env=bare)
        m.found(hearth)
        m.invite(hearth, pantry, "trusted")  # trusted: it announces its own ingests
        m.invite(hearth, den, "member")
        m.invite(hearth, laptop, "member")
        m.wait_full_mesh(timeout=90)
        hearth.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        pantry.cli_json("ingest", str(ENERGY), "--corpus", "energy", timeout=300)
        wait_for(
            lambda: {"heating", "energy"} <= corpora_seen(laptop) and llm_seen(laptop),
            timeout=60,
            what="the laptop to see both corpora and the model",
        )
        yield m
    finally:
        m.close()


def corpora_seen(node: MeshNode) -> set[str]:
    caps = node.cli_json("status", timeout=10)["capabilities"]
    return {c["params"].get("corpus") for c in caps if c["capability"].startswith("rag.query@")}


def llm_seen(node: MeshNode) -> bool:
    return bool(node.cli_json("llm", timeout=10)["models"])


def ask(node: MeshNode, *args: str) -> subprocess.CompletedProcess[str]:
    return node.cli("ask", *args, timeout=120)


def test_an_answer_cites_passages_of_both_corpora_with_their_pages_and_nodes(
    mesh: LocalMesh, server: OpenAIChatServer
) -> None:
    hearth, pantry, laptop = mesh.nodes["hearth"], mesh.nodes["pantry"], mesh.nodes["laptop"]
    thermostat_page = page_of(HEATING, "16 degrees at night")
    battery_page = page_of(ENERGY, "charges from the grid at night")
    assert (thermostat_page, battery_page) == (2, 2)  # not the first page: a default would not pass

    out = laptop.cli_json("ask", TWO_PART, "--no-cache", timeout=120)
    assert out["mode"] == "generated" and out["meta"]["model"] == MODEL and out["meta"]["rag"] == "used"
    assert {c: s["node"] for c, s in out["meta"]["corpora"].items()} == {
        "heating": hearth.node_id,
        "energy": pantry.node_id,
    }
    cited = {c["corpus"]: c for c in out["citations"]}
    assert set(cited) == {"heating", "energy"}
    assert (cited["heating"]["file"], cited["heating"]["page"]) == ("heating_handbook.pdf", thermostat_page)
    assert (cited["energy"]["file"], cited["energy"]["page"]) == ("solar_and_battery.pdf", battery_page)
    for c in cited.values():
        assert f"[{c['file']}#{c['chunk_id']}]" in out["answer"]
    by_id = {s["chunk_id"]: s for s in out["sources"]}
    assert by_id[cited["heating"]["chunk_id"]]["node"] == hearth.node_id
    assert by_id[cited["energy"]["chunk_id"]]["node"] == pantry.node_id
    assert [s["cited"] for s in out["sources"][:2]] == [True, True]
    assert not any(s["cited"] for s in out["sources"][2:])
    # the model saw both passages, each with its page, in the prompt the composer built
    system = server.requests[-1]["messages"][0]["content"]
    for c in cited.values():
        assert f"From {c['file']}#{c['chunk_id']} (page {c['page']})" in system

    # the same question, as a person sees it: the answer, the label, the numbered sources
    human = ask(laptop, TWO_PART, "--no-cache")
    answer, _, rest = human.stdout.partition("\n")
    numbered = out["answer"]  # each marker shown as the number of its source line
    for i, c in enumerate(out["citations"], start=1):
        numbered = numbered.replace(f"[{c['file']}#{c['chunk_id']}]", f"[{i}]")
    assert answer == numbered and "#" not in answer
    assert "(generated by test-chat)" in rest
    sources = rest.split("Sources:\n", 1)[1].splitlines()
    for i, src in enumerate(out["sources"][:2], start=1):  # a page's other passages join its line
        assert sources[i - 1].startswith(
            f"[{i}] {src['title']} — {src['file']}, page {src['page']} — {src['corpus']} on "
            f"{'hearth' if src['node'] == hearth.node_id else 'pantry'}  (cited"
        )
    pages = {(s["doc_cid"], s["page"], s["corpus"]) for s in out["sources"]}
    listed = [x for x in sources if x.startswith("[")]
    assert len(listed) == min(len(pages), 2 + 5) and len(set(listed)) == len(listed)
    assert "session" not in human.stderr


def test_without_any_model_the_extractive_answer_quotes_the_sentence_of_the_pdf(
    tmp_path: Path,
) -> None:
    with LocalMesh(tmp_path) as m:
        hearth = m.add("hearth")
        laptop = m.add("laptop", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        m.found(hearth)
        m.invite(hearth, laptop, "member")
        m.wait_full_mesh()
        hearth.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        wait_for(lambda: "heating" in corpora_seen(laptop), timeout=60, what="the laptop to see the corpus")
        assert not llm_seen(laptop)

        human = ask(laptop, BOILER)
        lines = human.stdout.splitlines()
        quoted = [line for line in lines if line.startswith('- "')]
        first = re.fullmatch(r'- "(.*)" \[1\]', quoted[0])  # the marker as its source's number
        assert first is not None and first.group(1) == BOILER_SENTENCE
        assert (
            lines[0] == "No language model is reachable; these passages of the documents match the question:"
        )
        assert "(extractive: sentences quoted from the documents)" in lines  # the header said why
        assert human.stdout.lower().count("no language model is reachable") == 1
        source = lines[lines.index("Sources:") + 1]
        page = page_of(HEATING, BOILER_SENTENCE)
        assert source.startswith(
            "[1] Heating and Hot Water Handbook — heating_handbook.pdf, "
            f"page {page} — heating on hearth  (cited"
        )

        out = laptop.cli_json("ask", BOILER)
        assert out["mode"] == "extractive" and out["meta"]["cache"] == "hit"  # the same answer, cached
        (citation,) = out["citations"]
        assert f'- "{BOILER_SENTENCE}" [heating_handbook.pdf#{citation["chunk_id"]}]' in out["answer"]
        assert citation == {
            "chunk_id": out["sources"][0]["chunk_id"],
            "file": "heating_handbook.pdf",
            "page": page,
            "corpus": "heating",
        }
        assert out["sources"][0]["node"] == hearth.node_id

        # kept in a session, the answer shows again as 'ask' printed it: numbered, with its source
        ask(laptop, BOILER, "--session", "quoted", "--no-cache")
        shown = laptop.cli("sessions", "show", "quoted").stdout
        assert f'- "{BOILER_SENTENCE}" [1]' in shown and "#" not in shown, shown
        assert f"   [1] Heating and Hot Water Handbook — heating_handbook.pdf, page {page}" in shown


def test_a_session_is_started_continued_listed_renamed_and_deleted(
    mesh: LocalMesh, server: OpenAIChatServer
) -> None:
    laptop = mesh.nodes["laptop"]
    server.reply = "Every October."
    first = ask(laptop, BOILER, "--new-session", "--corpus", "heating")
    found = re.fullmatch(
        r"session (\S+): continue it with 'hearthnet ask --session \1 QUESTION'\n", first.stderr
    )
    assert found is not None, first.stderr
    session = found.group(1)
    server.reply = "In the blue folder."
    follow_up = "Where is its service record kept?"
    second = subprocess.run(  # the question from stdin ('-')
        [
            sys.executable,
            "-m",
            "hearthnet.frontends.cli",
            "--home",
            str(laptop.home),
            "ask",
            "-",
            "--session",
            session,
        ],
        input=follow_up,
        capture_output=True,
        text=True,
        env={**laptop.env, **laptop.extra_env},
        timeout=120,
    )
    assert second.returncode == 0 and second.stdout.startswith("In the blue folder.\n"), second.stderr
    # the model was shown the session's earlier turn before the new question
    assert [(m["role"], m["content"]) for m in server.requests[-1]["messages"][1:]] == [
        ("user", BOILER),
        ("assistant", "Every October."),
        ("user", follow_up),
    ]
    listed = laptop.cli_json("sessions")["sessions"]
    assert [(s["id"], s["turns"], s["title"]) for s in listed if s["id"] == session] == [(session, 2, BOILER)]
    laptop.cli("sessions", "rename", session, "Boiler questions")
    shown = laptop.cli("sessions", "show", session).stdout
    assert shown.startswith(f"session {session}: Boiler questions (2 turns")
    assert f"Q: {BOILER}\nA: Every October." in shown and f"Q: {follow_up}\nA: In the blue folder." in shown
    laptop.cli("sessions", "delete", session)
    gone = laptop.cli("sessions", "show", session, check=False)
    assert gone.returncode == 1 and gone.stderr == f"hearthnet: not_found: no session {session}\n"


def test_control_characters_from_the_model_never_reach_the_terminal(
    mesh: LocalMesh, server: OpenAIChatServer
) -> None:
    laptop = mesh.nodes["laptop"]
    server.reply = "Every \x1b]0;owned\x07October,\r\nsee \x1b[2Jthe folder."
    out = ask(laptop, BOILER, "--no-cache", "--corpus", "heating").stdout
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert out.startswith("Every \\u001b]0;owned\\u0007October,\nsee \\u001b[2Jthe folder.\n")


def test_ctrl_c_mid_answer_exits_130_and_stops_the_model(mesh: LocalMesh, server: OpenAIChatServer) -> None:
    laptop = mesh.nodes["laptop"]
    server.reply = "Every year in early October, by a registered engineer."
    server.hold_after = 3  # the server holds the rest until the client walks away
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hearthnet.frontends.cli",
            "--home",
            str(laptop.home),
            "ask",
            BOILER,
            "--no-cache",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**laptop.env, **laptop.extra_env},
    )
    try:
        assert proc.stdout is not None
        seen = b""
        while seen != b"Every year in":  # the first three words, streamed before the answer ends
            piece = proc.stdout.read1(100)  # type: ignore[attr-defined]
            assert piece and b"Every year in".startswith(seen + piece), (seen, piece)
            seen += piece
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert proc.stderr is not None and proc.stderr.read() == b"hearthnet: interrupted\n"
        assert proc.stdout.read() == b"\n"  # the line is ended, nothing else printed
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipes
    # the laptop's control server cancels the ask, the cancel travels to the den, which closes its stream
    assert server.disconnected.wait(20)
