"""The OpenAI-compatible gateway driven by the official ``openai`` client against a real node.

One node ``a`` (founder): MiniLM embeddings, RAG with the heating handbook in corpus ``heating``
and a note in the owner's ``personal`` corpus, and ``llm.chat`` backed by
``tests/openai_chat_server.py`` (a real loopback OpenAI-compatible server).  Keys are made with
``hearthnet ui token create``, as a person would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from hearthnet.client import Client, plain_output
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.openai_chat_server import OpenAIChatServer
from tests.ui.harness import Ui, owner_link, person_link, token_of, ui_url

ROOT = Path(__file__).resolve().parents[2]
HEATING = ROOT / "hearthnet" / "demo" / "heating_handbook.pdf"
MODEL = "test-chat"
MINILM = "all-MiniLM-L6-v2"
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}
BURST = 40


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh_server(server: OpenAIChatServer) -> None:
    server.mode, server.reply, server.hold_after, server.cite_each_file = "normal", None, None, False
    server.retry_after = "2"
    server.release.clear()
    server.disconnected.clear()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, server: OpenAIChatServer) -> Iterator[MeshNode]:
    root = tmp_path_factory.mktemp("gateway")
    m = LocalMesh(root)
    try:
        a = m.add("a", env=UI_ENV)
        with (a.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
                "context_tokens = 4096\nmax_output_tokens = 256\n"
            )
        config = a.home / "config.toml"
        config.write_text(
            config.read_text().replace("[ui]\n", f"[ui]\napi_requests_per_minute = 60\napi_burst = {BURST}\n")
        )
        m.found(a)
        a.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        note = root / "diary.txt"
        note.write_text("My private diary: the spare key is under the blue flower pot.\n")
        a.cli_json("ingest", str(note), "--corpus", "personal", timeout=300)
        wait_for(lambda: (a.home / "ui.json").exists(), timeout=30, what="the UI to start")
        yield a
    finally:
        m.close()


def key_of(node: MeshNode, name: str, level: str = "member") -> str:
    return token_of(person_link(node, name, level))


@pytest.fixture(scope="module")
def member_key(node: MeshNode) -> str:
    return key_of(node, "agent")


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """The gateway clients a test made are closed when it ends (not left to the collector: one
    held by a caught exception's traceback is collected in a cycle, its sockets first)."""
    yield
    while _clients:
        _clients.pop().close()


def client(node: MeshNode, key: str, **kw: Any) -> openai.OpenAI:
    made = openai.OpenAI(base_url=ui_url(node) + "/v1", api_key=key, max_retries=0, timeout=60, **kw)
    _clients.append(made)
    return made


# -- models and embeddings ------------------------------------------------------------------------
def test_models_lists_every_chat_and_embedding_model_owned_by_the_node(
    node: MeshNode, member_key: str
) -> None:
    models = {m.id: m for m in client(node, member_key).models.list()}
    assert {MODEL, MINILM} <= set(models)
    assert models[MODEL].owned_by == "a" and models[MINILM].owned_by == "a"
    extra = models[MODEL].model_extra or {}
    assert extra["hearthnet"]["kinds"] == ["chat"] and extra["hearthnet"]["context_tokens"] == 4096
    one = client(node, member_key).models.retrieve(MINILM)
    assert one.id == MINILM and (one.model_extra or {})["hearthnet"]["dim"] == 384
    with pytest.raises(openai.NotFoundError) as err:
        client(node, member_key).models.retrieve("no-such-model")
    assert err.value.code == "model_not_found"


def embed_text(node: MeshNode, texts: list[str]) -> tuple[np.ndarray, int]:
    with Client(node.home) as c:
        result = c.call("embed.text", params={"model": MINILM}, input={"texts": texts})
    return np.array(plain_output(result.output)["embeddings"]), int(result.meta["tokens"])


def test_embeddings_equal_embed_texts_as_floats_and_as_base64(node: MeshNode, member_key: str) -> None:
    texts = ["When is the boiler serviced?", "Wie hoch ist die Vorlauftemperatur?", "ok"]
    expected, tokens = embed_text(node, texts)
    gateway = client(node, member_key)
    as_floats = gateway.embeddings.create(model=MINILM, input=texts, encoding_format="float")
    got = np.array([d.embedding for d in as_floats.data])
    assert got.shape == (3, 384) and [d.index for d in as_floats.data] == [0, 1, 2]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert as_floats.usage.prompt_tokens == tokens > 0 and as_floats.model == MINILM
    # the client's default asks for base64 (float32 little-endian) and decodes it
    as_base64 = gateway.embeddings.create(model=MINILM, input=texts[0])
    np.testing.assert_allclose(np.array(as_base64.data[0].embedding), expected[0], atol=1e-5)
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        gateway.embeddings.create(model=MINILM, input="x", dimensions=128)
    with pytest.raises(openai.NotFoundError) as err:
        gateway.embeddings.create(model="no-such-model", input="x")
    assert err.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="token ids"):
        gateway.embeddings.create(model=MINILM, input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="at most 8192"):
        gateway.embeddings.create(model=MINILM, input="x" * 8193)


def seed_embed_query(text: str, model: str, tei_url: str, timeout: float = 10.0) -> list[float]:
    """Seed 000's ``_embed_query`` (section 5.1, Option 1), as the seeds' runtime calls TEI."""
    response = httpx.post(f"{tei_url}/v1/embeddings", json={"model": model, "input": [text]}, timeout=timeout)
    response.raise_for_status()
    data = response.json()
    return data["data"][0]["embedding"]  # type: ignore[no-any-return]


def test_the_seeds_runtime_embeds_through_the_node_as_its_tei_server(node: MeshNode, member_key: str) -> None:
    """DOCPROC_TEI_EMBEDDINGS_URL=<ui>/t/<key>: the seed's request, unchanged, without a header."""
    expected, _ = embed_text(node, ["Heizung warten"])
    vector = seed_embed_query("Heizung warten", MINILM, f"{ui_url(node)}/t/{member_key}")
    np.testing.assert_allclose(np.array(vector), expected[0], atol=1e-5)
    with pytest.raises(httpx.HTTPStatusError) as err:
        seed_embed_query("Heizung warten", MINILM, f"{ui_url(node)}/t/hn_not-a-key")
    assert err.value.response.status_code == 401


# -- chat -----------------------------------------------------------------------------------------
def test_chat_answers_whole_and_streamed_through_llm_chat(
    node: MeshNode, member_key: str, server: OpenAIChatServer
) -> None:
    server.reply = "The boiler is serviced every October."
    gateway = client(node, member_key)
    messages: Any = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "When?"}]
    whole = gateway.chat.completions.create(model=MODEL, messages=messages, max_tokens=50, temperature=0)
    assert whole.object == "chat.completion" and whole.model == MODEL
    assert whole.choices[0].message.content == server.reply
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and whole.usage.completion_tokens == 6
    sent = server.requests[-1]
    assert sent["messages"] == messages and sent["max_tokens"] == 50 and sent["temperature"] == 0
    stream = gateway.chat.completions.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == server.reply and len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 6
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6
    cut = gateway.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=2)
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.content == "The boiler"
    with pytest.raises(openai.NotFoundError) as err:
        gateway.chat.completions.create(model="no-such-model", messages=messages)
    assert err.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="tools"):
        gateway.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        )


def test_a_400_names_the_field_at_fault_as_the_client_sent_it(node: MeshNode, member_key: str) -> None:
    gateway = client(node, member_key)
    messages: Any = [{"role": "user", "content": "When?"}]
    with pytest.raises(openai.BadRequestError) as err:  # the model's own limit, checked by llm.chat
        gateway.chat.completions.create(model=MODEL, messages=messages, max_tokens=100_000)
    assert err.value.param == "max_tokens" and "input." not in err.value.message
    assert "max_tokens is 100000" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:  # the gateway's own check
        gateway.chat.completions.create(model=MODEL, messages=messages, temperature=7)
    assert err.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as err:
        gateway.embeddings.create(model=MINILM, input=[""])
    assert err.value.param == "input"


def test_legacy_completions_ask_the_chat_model_and_answer_as_text_completion(
    node: MeshNode, member_key: str, server: OpenAIChatServer
) -> None:
    """LlamaIndex's ``OpenAILike`` (and other clients) default to ``/v1/completions``."""
    server.reply = "The boiler is serviced every October."
    gateway = client(node, member_key)
    whole = gateway.completions.create(model=MODEL, prompt="When is the boiler serviced?", max_tokens=50)
    assert whole.object == "text_completion" and whole.choices[0].text == server.reply
    assert whole.choices[0].finish_reason == "stop" and whole.usage is not None
    sent = server.requests[-1]
    assert sent["messages"] == [{"role": "user", "content": "When is the boiler serviced?"}]
    assert sent["max_tokens"] == 50
    stream = list(gateway.completions.create(model=MODEL, prompt="When is the boiler serviced?", stream=True))
    assert all(c.object == "text_completion" for c in stream)
    assert "".join(c.choices[0].text for c in stream if c.choices) == server.reply
    with pytest.raises(openai.BadRequestError, match="/v1/chat/completions"):
        gateway.completions.create(model=MODEL, prompt="x", echo=True)
    with pytest.raises(openai.BadRequestError, match="/v1/chat/completions"):
        gateway.completions.create(model=MODEL, prompt=["a", "b"])
    with pytest.raises(openai.NotFoundError):
        gateway.completions.create(model="no-such-model", prompt="x")


def test_a_rag_answer_cites_the_handbook_with_its_sources(
    node: MeshNode, member_key: str, server: OpenAIChatServer
) -> None:
    server.cite_each_file = True
    gateway = client(node, member_key)
    question: Any = [{"role": "user", "content": "When is the boiler serviced?"}]
    answer = gateway.chat.completions.create(
        model=MODEL, messages=question, extra_body={"corpora": ["heating"]}
    )
    content = answer.choices[0].message.content or ""
    extra = (answer.model_extra or {})["hearthnet"]
    assert extra["mode"] == "generated" and extra["rag"] == "used"
    cited = extra["citations"][0]
    assert cited["file"] == "heating_handbook.pdf" and cited["corpus"] == "heating" and cited["page"] >= 1
    assert f"[heating_handbook.pdf#{cited['chunk_id']}]" in content
    assert extra["sources"][0]["cited"] and extra["sources"][0]["text"]
    assert answer.usage is not None and answer.usage.prompt_tokens > 0
    # the model got the passages in its system message and the question last
    sent = server.requests[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "When is the boiler serviced?"}
    assert "heating_handbook.pdf#" in sent[0]["content"]
    # streamed: the deltas, then the sources in the last choice chunk's extension
    stream = gateway.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "At what temperature is the thermostat at night?"}],
        stream=True,
        extra_body={"corpora": []},  # every corpus this key may search
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = (chunks[-1].model_extra or {})["hearthnet"]
    assert last["citations"] and "answer" not in last  # the deltas are the answer: no second copy
    assert text.startswith("According to the documents")
    assert set(last["corpora"]) == {"heating"}  # not the owner's personal corpus


def test_earlier_turns_reach_the_model_as_history(
    node: MeshNode, member_key: str, server: OpenAIChatServer
) -> None:
    messages: Any = [
        {"role": "system", "content": "ignored: the composer writes its own"},
        {"role": "user", "content": "Who services the boiler?"},
        {"role": "assistant", "content": "A registered engineer."},
        {"role": "user", "content": "And when?"},
    ]
    client(node, member_key).chat.completions.create(
        model=MODEL, messages=messages, extra_body={"corpora": ["heating"]}
    )
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1:] == messages[1:]
    assert "ignored" not in sent[0]["content"]


# -- who may call what ----------------------------------------------------------------------------
def test_a_bad_or_revoked_key_is_401_and_a_member_cannot_reach_the_owners_corpus(node: MeshNode) -> None:
    with pytest.raises(openai.AuthenticationError) as err:
        client(node, "hn_made-up").models.list()
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
    key = key_of(node, "leaver")
    assert client(node, key).models.list().data
    node.cli_json("ui", "token", "revoke", "leaver")
    with pytest.raises(openai.AuthenticationError):
        client(node, key).models.list()
    member = key_of(node, "nosy")
    question: Any = [{"role": "user", "content": "Where is the spare key?"}]
    with pytest.raises(openai.PermissionDeniedError) as denied:
        client(node, member).chat.completions.create(
            model=MODEL, messages=question, extra_body={"corpora": ["personal"]}
        )
    assert denied.value.status_code == 403 and "personal" in denied.value.message
    # an owner link is a browser's one-time sign-in, never an API key
    with pytest.raises(openai.AuthenticationError):
        client(node, token_of(owner_link(node))).models.list()


def test_the_web_uis_session_cookie_never_opens_the_gateway(node: MeshNode) -> None:
    ui = Ui(owner_link(node))
    try:
        assert ui.get("/api/session").status_code == 200  # signed in as the owner
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/mcp")]:
            response = ui.http.request(method, path, json={}, headers={"X-CSRF-Token": ui.csrf})
            assert response.status_code == 401, (path, response.text)
            body = response.json()["error"]
            code = body["data"]["error"] if path == "/mcp" else body["code"]  # JSON-RPC's shape on /mcp
            assert code == "invalid_api_key" and "cookie is not one" in body["message"]
            assert response.headers["www-authenticate"].startswith("Bearer")
    finally:
        ui.close()


def test_host_routes_methods_and_malformed_keys_are_refused_in_openais_shape(
    node: MeshNode, member_key: str
) -> None:
    url = ui_url(node)
    auth = {"Authorization": f"Bearer {member_key}"}
    with httpx.Client(base_url=url, timeout=30) as http:
        rebinding = http.get("/v1/models", headers={**auth, "Host": "evil.example"})
        assert rebinding.status_code == 421
        missing = http.get("/v1/nothing", headers=auth)
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
        wrong = http.get("/v1/chat/completions", headers=auth)
        assert wrong.status_code == 405 and set(wrong.json()["error"]) == {"message", "type", "param", "code"}
        assert http.get("/v1/models", headers={"Authorization": "Basic abc"}).status_code == 400
        both = http.get(f"/t/{member_key}/v1/models", headers=auth)
        assert both.status_code == 400 and "once" in both.json()["error"]["message"]
        not_json = http.post("/v1/chat/completions", headers=auth, content=b"{nope")
        assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]["message"]
        unknown = http.post(
            "/v1/chat/completions",
            headers=auth,
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1},
        )
        assert unknown.status_code == 400 and "frobnicate" in unknown.json()["error"]["message"]


def test_an_oversized_body_is_413_declared_or_streamed(node: MeshNode, member_key: str) -> None:
    huge = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (1 << 20)}]}
    with pytest.raises(openai.APIStatusError) as err:
        client(node, member_key).chat.completions.create(**huge)
    assert err.value.status_code == 413 and err.value.code == "request_too_large"
    body = json.dumps(huge).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        for i in range(0, len(body), 65536):
            yield body[i : i + 65536]

    with httpx.Client(timeout=30) as http:
        response = http.post(
            ui_url(node) + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {member_key}"},
            content=chunks(),
        )
    assert response.status_code == 413


def test_a_key_past_its_rate_is_429_with_retry_after(node: MeshNode) -> None:
    key = key_of(node, "hasty")
    other = key_of(node, "patient")
    statuses = []
    with httpx.Client(base_url=ui_url(node), timeout=30) as http:
        for _ in range(BURST + 5):
            response = http.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            statuses.append(response.status_code)
            if response.status_code == 429:
                break
        assert statuses[-1] == 429 and statuses.count(200) >= BURST - 2
        refused = response.json()["error"]
        assert refused["code"] == "rate_limit_exceeded" and refused["type"] == "rate_limit_error"
        assert 1 <= int(response.headers["retry-after"]) <= 2
        # another key is not slowed down by this one
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {other}"}).status_code == 200
        deadline = time.monotonic() + 5
        while http.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code != 200:
            assert time.monotonic() < deadline, "the bucket never refilled"


# -- bus errors as HTTP ---------------------------------------------------------------------------
def test_bus_errors_become_their_statuses(node: MeshNode, member_key: str, server: OpenAIChatServer) -> None:
    gateway = client(node, member_key)
    hi: Any = [{"role": "user", "content": "hi"}]
    server.mode, server.retry_after = "busy", "3"
    with pytest.raises(openai.RateLimitError) as busy:
        gateway.chat.completions.create(model=MODEL, messages=hi)
    assert busy.value.code == "capacity_exceeded" and busy.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.RateLimitError):  # before the first chunk: an ordinary error answer
        gateway.chat.completions.create(model=MODEL, messages=hi, stream=True)
    server.mode = "error"
    with pytest.raises(openai.InternalServerError) as crashed:
        gateway.chat.completions.create(model=MODEL, messages=hi)
    assert crashed.value.status_code == 500 and crashed.value.code == "internal_error"
    server.mode = "hang_up"  # the model server drops the connection after its first word
    with pytest.raises(openai.APIError, match="closed"):
        for _ in gateway.chat.completions.create(model=MODEL, messages=hi, stream=True):
            pass
    with pytest.raises(openai.APIStatusError) as dropped:
        gateway.chat.completions.create(model=MODEL, messages=hi)
    assert dropped.value.status_code == 503 and dropped.value.code == "partition"


def test_a_client_that_walks_away_mid_stream_closes_the_model_servers_stream(
    node: MeshNode, member_key: str, server: OpenAIChatServer
) -> None:
    server.reply = "one two three four five six"
    server.hold_after = 2
    stream = client(node, member_key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count"}], stream=True
    )
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    stream.close()
    assert server.disconnected.wait(30), "the model server never saw its stream closed"
