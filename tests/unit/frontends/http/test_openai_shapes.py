"""The gateway's pure parts: OpenAI request checks, response shapes, the key's token bucket."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from hearthnet.errors import BadRequest, InternalError
from hearthnet.frontends.http.bearer import TokenBucket, is_bearer_path, openai_error_body
from hearthnet.frontends.http.openai_shapes import (
    Turn,
    chunk,
    completion,
    decode_embeddings,
    embeddings_response,
    parse_chat,
    parse_embeddings,
)


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}


def test_messages_become_llm_chats_text_messages() -> None:
    req = parse_chat(
        chat(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": "c", "name": "bot", "refusal": None},
                {"role": "user", "content": "d"},
            ]
        )
    )
    assert req.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"},
    ]
    assert not req.rag and req.max_tokens is None and req.temperature is None and req.stop is None


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}]), "tool messages"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "text parts",
        ),
        (chat(messages=[{"role": "user", "content": "x", "audio": {}}]), "unrecognized field audio"),
        (chat(messages=[{"role": "boss", "content": "x"}]), "role"),
        (chat(frobnicate=1), "frobnicate"),
        (chat(n=2), "n is not supported"),
        (chat(logprobs=True), "logprobs"),
        (chat(tools=[{"type": "function"}]), "tools"),
        (chat(response_format={"type": "json_object"}), "response_format"),
        (chat(stream_options={"include_usage": True}), "stream_options"),
        (chat(max_tokens=5, max_completion_tokens=6), "differ"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(temperature=2.5), "temperature"),
        (chat(temperature=True), "temperature"),
        (chat(model=""), "model"),
        (chat(corpora=["heating"], stop="x"), "stop"),
        (chat(corpora="heating"), "corpora"),
        (chat(rag_config={"archives": [{"collection_name": "x"}]}), r"archives\[0\].name"),
        (chat(rag_config=["x"]), "rag_config"),
    ],
)
def test_what_the_gateway_cannot_honour_is_refused_by_name(body: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        parse_chat(body)


def test_hints_without_effect_on_the_answers_shape_are_accepted() -> None:
    req = parse_chat(
        chat(
            user="u",
            top_p=0.9,
            seed=3,
            presence_penalty=0.1,
            n=1,
            tool_choice="none",
            response_format={"type": "text"},
            stream=True,
            stream_options={"include_usage": True},
            max_completion_tokens=7,
            temperature=None,
            stop=["\n"],
        )
    )
    assert req.stream and req.include_usage and req.max_tokens == 7 and req.temperature is None
    assert req.stop == ["\n"]


def test_corpora_or_archives_make_a_rag_request_and_an_empty_rag_config_does_not() -> None:
    assert parse_chat(chat(corpora=[])).rag
    assert parse_chat(chat(corpora=["b", "a", "b"])).corpora == ["a", "b"]
    assert parse_chat(chat(rag_config={"archives": [{"name": "x", "collection_name": "c"}]})).rag
    for empty in (None, {}, {"archives": []}, {"archives": None}):
        assert not parse_chat(chat(rag_config=empty)).rag


def test_the_question_is_the_last_user_message_and_earlier_ones_are_turns() -> None:
    req = parse_chat(
        chat(
            corpora=[],
            messages=[
                {"role": "system", "content": "left out"},
                {"role": "assistant", "content": "a greeting with no question is left out"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
                {"role": "user", "content": "q3"},
            ],
        )
    )
    question, turns = req.question_and_history()
    assert question == "q2\n\nq3" and turns == [Turn("q1", "a1")]
    last_assistant = parse_chat(
        chat(corpora=[], messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    )
    with pytest.raises(BadRequest, match="last message"):
        last_assistant.question_and_history()


def test_embeddings_input_is_text_within_embed_texts_limits() -> None:
    one = parse_embeddings({"model": "m", "input": "x"})
    assert one.texts == ["x"] and not one.base64 and one.dimensions is None
    assert parse_embeddings({"model": "m", "input": ["a", "b"], "encoding_format": "base64"}).base64
    for body, named in [
        ({"model": "m", "input": [1, 2]}, "token ids"),
        ({"model": "m", "input": []}, "1..256"),
        ({"model": "m", "input": ["x"] * 257}, "1..256"),
        ({"model": "m", "input": ""}, "empty"),
        ({"model": "m", "input": "x" * 8193}, "8192"),
        ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x"}, "model"),
        ({"model": "m", "input": "x", "extra": 1}, "extra"),
    ]:
        with pytest.raises(BadRequest, match=named):
            parse_embeddings(body)


def test_embeddings_answer_as_floats_or_base64_of_the_same_float32_bytes() -> None:
    vectors = np.array([[0.25, -1.5, 3.0], [1e-7, 0.0, -0.125]], dtype=np.float32)
    packed = {"embeddings": vectors.astype("<f4").tobytes(), "dim": 3}
    decoded = decode_embeddings(packed, 2)
    floats = embeddings_response("m", decoded, as_base64=False, prompt_tokens=4)
    assert floats["object"] == "list" and floats["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    assert [d["embedding"] for d in floats["data"]] == vectors.tolist()
    b64 = embeddings_response("m", decoded, as_base64=True, prompt_tokens=4)
    again = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in b64["data"]]
    np.testing.assert_array_equal(np.array(again), vectors)
    with pytest.raises(InternalError):
        decode_embeddings({"embeddings": b"\0" * 8, "dim": 3}, 1)


def test_completion_and_chunk_shapes() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    whole = completion("c1", 5, "m", "hi", "stop", usage, {"mode": "generated"})
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"] == "hi"
    assert whole["hearthnet"] == {"mode": "generated"} and whole["usage"] == usage
    piece = chunk("c1", 5, "m", {"content": "x"}, with_usage=True)
    assert piece["choices"][0]["delta"] == {"content": "x"} and piece["usage"] is None
    last = chunk("c1", 5, "m", None, usage=usage, with_usage=True)
    assert last["choices"] == [] and last["usage"] == usage
    assert "usage" not in chunk("c1", 5, "m", {}, "stop")


def test_errors_have_openais_shape_and_type() -> None:
    assert json.loads(openai_error_body(429, "slow down", "rate_limit_exceeded")) == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    assert json.loads(openai_error_body(503, "x"))["error"]["type"] == "server_error"
    assert json.loads(openai_error_body(401, "x"))["error"]["type"] == "invalid_request_error"


def test_the_token_bucket_allows_a_burst_then_the_rate_per_key() -> None:
    now = [0.0]
    bucket = TokenBucket(60, 3, clock=lambda: now[0], max_keys=2)
    assert [bucket.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take("a") == pytest.approx(1.0)  # one a second
    assert bucket.take("b") == 0.0  # another key has its own bucket
    now[0] = 0.5
    assert bucket.take("a") == pytest.approx(0.5)
    now[0] = 1.0
    assert bucket.take("a") == 0.0
    now[0] = 100.0  # refilled to the burst, never beyond
    assert [bucket.take("a") for _ in range(4)][-1] > 0
    bucket.take("c")  # at most two keys kept: "b" (least recently used) is forgotten
    assert "b" not in bucket._buckets and set(bucket._buckets) == {"a", "c"}
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


@pytest.mark.parametrize(
    ("path", "bearer"),
    [
        ("/v1/models", True),
        ("/v1", True),
        ("/mcp", True),
        ("/t/hn_x/v1/embeddings", True),
        ("/api/session", False),
        ("/v10", False),
        ("/mcpx", False),
        ("/", False),
    ],
)
def test_which_paths_are_the_programs(path: str, bearer: bool) -> None:
    assert is_bearer_path(path) is bearer
