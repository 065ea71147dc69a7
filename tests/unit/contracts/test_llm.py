"""Pure parts of ``llm.chat``: input checks, the token estimate, the SSE decoder, Retry-After."""

from __future__ import annotations

import email.utils
import json
from pathlib import Path
from typing import Any

import pytest

from hearthnet.contracts.llm import validate_chat_input
from hearthnet.errors import BadRequest, InternalError
from hearthnet.services.llm import MAX_MESSAGES, MAX_TOTAL_CHARS, estimate_prompt_tokens, estimate_tokens
from hearthnet.services.llm.openai_backend import plain_prompt, retry_after_ms
from hearthnet.services.llm.sse import SSEDecoder
from tests.shared_data import SCIFACT_DIR

COUNTS = json.loads((Path(__file__).parents[2] / "data" / "gemma3_token_counts.json").read_text("utf-8"))
USER = {"role": "user", "content": "hello"}


def test_a_valid_input_becomes_a_checked_request() -> None:
    req = validate_chat_input(
        {
            "messages": [{"role": "system", "content": "be brief"}, USER],
            "max_tokens": 10,
            "temperature": 0,
            "stop": "\n",
        },
        max_output_tokens=10,
    )
    assert req.messages == (("system", "be brief"), ("user", "hello"))
    assert req.max_tokens == 10 and req.temperature == 0.0 and req.stop == ("\n",)
    assert validate_chat_input({"messages": [USER]}).max_tokens is None


@pytest.mark.parametrize(
    ("input", "words"),
    [
        ({}, "non-empty list"),
        ({"messages": []}, "non-empty list"),
        ({"messages": "hi"}, "non-empty list"),
        ({"messages": [USER] * (MAX_MESSAGES + 1)}, f"the limit is {MAX_MESSAGES}"),
        ({"messages": [{"role": "user", "content": "x" * (MAX_TOTAL_CHARS + 1)}]}, "characters of content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "role must be system, user or assistant"),
        ({"messages": [{"role": "user"}]}, "content must be a string, got NoneType"),
        ({"messages": [{"role": "user", "content": "x", "name": "a"}]}, "unknown field"),
        ({"messages": ["hello"]}, "must be a map"),
        ({"messages": [{"role": "system", "content": "x"}]}, "at least one user or assistant"),
        ({"messages": [USER], "max_tokens": 0}, "positive integer"),
        ({"messages": [USER], "max_tokens": True}, "positive integer"),
        ({"messages": [USER], "max_tokens": 11}, "at most 10 tokens"),
        ({"messages": [USER], "temperature": -0.1}, "from 0 to 2"),
        ({"messages": [USER], "temperature": float("nan")}, "from 0 to 2"),
        ({"messages": [USER], "temperature": "hot"}, "from 0 to 2"),
        ({"messages": [USER], "stop": ["a"] * 5}, "at most 4 strings"),
        ({"messages": [USER], "stop": [""]}, "non-empty string"),
        ({"messages": [USER], "stop": ["x" * 65]}, "the limit is 64"),
        ({"messages": [USER], "stop": 5}, "a string or a list"),
        ({"messages": [USER], "stream": True}, "unknown llm.chat input field(s): stream"),
    ],
)
def test_bad_input_is_bad_request_saying_what(input: dict[str, Any], words: str) -> None:
    with pytest.raises(BadRequest) as exc:
        validate_chat_input(input, max_output_tokens=10)
    assert words in exc.value.message


def test_the_estimate_is_not_below_gemma_3s_count_on_real_and_multilingual_text() -> None:
    for sample in COUNTS["samples"]:
        assert estimate_tokens(sample["text"]) >= sample["gemma3_tokens"], sample["name"]
    wanted = {d["doc_id"]: d["gemma3_tokens"] for d in COUNTS["scifact"]}
    checked = 0
    with (SCIFACT_DIR / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["_id"] in wanted:
                text = doc.get("title", "") + "\n" + doc.get("text", "")
                assert estimate_tokens(text) >= wanted[doc["_id"]], doc["_id"]
                checked += 1
    assert checked == len(wanted) == 40


def test_the_estimate_rules() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("the cat") == 2
    assert estimate_tokens("extraordinarily") == 1 + 14 // 4 + 1
    assert estimate_tokens("2024") == 4 and estimate_tokens("in 2024") == 1 + 5
    assert estimate_tokens("a\n\nb") == 4
    assert estimate_tokens("Котёл") == 3  # five letters of an alphabet: one per two
    assert estimate_tokens("東京") == 2 and estimate_tokens("🎉") == 2
    assert estimate_prompt_tokens([("user", "the cat")]) == 4 + 6 + 2


def test_sse_events_across_arbitrary_splits_and_line_endings() -> None:
    stream = b': ping\r\n\r\ndata: {"a":1}\r\n\r\ndata: one\ndata: two\n\nevent: x\ndata: [DONE]\r\r'
    for step in (1, 2, 3, 7, len(stream)):
        decoder = SSEDecoder()
        events: list[str] = []
        for i in range(0, len(stream), step):
            events += decoder.feed(stream[i : i + step])
        events += decoder.close()
        assert events == ['{"a":1}', "one\ntwo", "[DONE]"], step
    last = SSEDecoder()
    assert last.feed(b"data: tail") == [] and last.close() == ["tail"]


def test_sse_refuses_an_endless_line_and_bytes_that_are_not_utf8() -> None:
    with pytest.raises(InternalError, match="over 64 bytes"):
        SSEDecoder(max_line=64).feed(b"data: " + b"x" * 100)
    with pytest.raises(InternalError, match="not UTF-8"):
        SSEDecoder().feed(b"data: \xff\n")


def test_retry_after_seconds_dates_and_garbage() -> None:
    assert retry_after_ms("3") == 3000 and retry_after_ms(" 0.5 ") == 500
    assert retry_after_ms(None) == 1000 and retry_after_ms("soon") == 1000 and retry_after_ms("nan") == 1000
    assert retry_after_ms("-4") == 0 and retry_after_ms("1e12") == 3_600_000
    date = email.utils.formatdate(1_000_000_060, usegmt=True)
    assert retry_after_ms(date, now=1_000_000_000) == 60_000


def test_plain_prompt_renders_turns_for_a_base_model() -> None:
    prompt = plain_prompt(
        (("system", "Context: [a#1] x."), ("user", " Q1 "), ("assistant", "A1"), ("user", "Q2"))
    )
    assert prompt == "Context: [a#1] x.\nUser: Q1\nAssistant: A1\nUser: Q2\nAssistant:"
