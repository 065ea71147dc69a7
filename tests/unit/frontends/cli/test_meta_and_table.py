"""``ingest --meta KEY=VALUE`` typing and its errors; ``query --table`` columns from metadata."""

from __future__ import annotations

import pytest

from hearthnet.errors import BadRequest
from hearthnet.frontends.cli.args import meta_args
from hearthnet.frontends.cli.hits import hit_lines, hits_table


def test_values_are_typed_as_written() -> None:
    assert meta_args(
        [
            "subject=Heating oil",
            "priority=2",
            "negative=-3",
            "cost=412.5",
            "big=1e3",
            "urgent=true",
            "done=False",
            "when=2024-05-01",
            "stamp=2024-05-01T09:30:00",
            "ref=007",
            "empty=",
            "equation=a=b",
        ]
    ) == {
        "subject": "Heating oil",
        "priority": 2,
        "negative": -3,
        "cost": 412.5,
        "big": 1000.0,
        "urgent": True,
        "done": False,
        "when": "2024-05-01",
        "stamp": "2024-05-01T09:30:00",
        "ref": "007",
        "empty": "",
        "equation": "a=b",
    }
    assert meta_args(None) == {}


def test_a_type_can_be_named() -> None:
    assert meta_args(
        [
            "zip:str=01067",
            "n:int=7",
            "x:float=2",
            "ok:bool=yes",
            "no:bool=0",
            "due:date=2024-05-07",
            "s:str=true",
        ]
    ) == {"zip": "01067", "n": 7, "x": 2.0, "ok": True, "no": False, "due": "2024-05-07", "s": "true"}
    assert meta_args(["at:date=2024-05-01T09:30:00+02:00"]) == {"at": "2024-05-01T09:30:00+02:00"}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("novalue", "--meta 'novalue' must be KEY=VALUE (or KEY:TYPE=VALUE)"),
        ("=x", "--meta key '' is invalid"),
        ("1st=x", "--meta key '1st' is invalid"),
        ("a-b=x", "--meta key 'a-b' is invalid"),
        ("n:integer=1", "--meta n: type 'integer' is not one of str, int, float, bool, date"),
        ("n:int=high", "--meta n: 'high' is not a whole number"),
        ("n:int=1.5", "--meta n: '1.5' is not a whole number"),
        ("n=99999999999999999999", "outside the 64-bit integer range; use n:str=..."),
        ("x:float=nan", "--meta x: 'nan' is not a finite number"),
        ("x:float=inf", "--meta x: 'inf' is not a finite number"),
        ("x:float=1e999", "--meta x: 1e999 is not a finite number"),
        ("b:bool=maybe", "--meta b: 'maybe' is not a boolean"),
        ("d:date=May 7", "--meta d: 'May 7' is not an ISO 8601 date"),
        ("d:date=2024-13-01", "is not an ISO 8601 date"),
        ("s=" + "x" * 1001, "--meta s: the value is 1001 characters; at most 1000"),
    ],
)
def test_a_bad_item_is_a_clear_error(item: str, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        meta_args([item])
    assert message in info.value.message


def test_a_key_given_twice_or_too_many_keys_are_refused() -> None:
    with pytest.raises(BadRequest, match="--meta a is given twice"):
        meta_args(["a=1", "a:str=2"])
    with pytest.raises(BadRequest, match="a document has at most 32 fields"):
        meta_args([f"k{i}={i}" for i in range(33)])


def chunk(
    rank: int, metadata: dict[str, object], text: str = "some text", **extra: object
) -> dict[str, object]:
    return {"rank": rank, "score": 0.5, "text": text, "metadata": metadata, **extra}


def test_the_table_takes_subject_and_timestamp_from_metadata_and_dashes_what_is_absent() -> None:
    table = hits_table(
        [
            chunk(
                1, {"subject": "Heating\noil", "timestamp": "2024-05-01T09:30:00"}, "Heating  oil\n delivery"
            ),
            chunk(2, {"doc_title": "Walden", "date": "1854-08-09"}),
            chunk(3, {"page": 4}),
        ],
        width=100,
    ).splitlines()
    assert table[0].split() == ["#", "score", "subject", "timestamp", "snippet"]
    assert table[1].split() == [
        "1",
        "0.500",
        "Heating",
        "oil",
        "2024-05-01T09:30:00",
        "Heating",
        "oil",
        "delivery",
    ]
    assert table[2].split()[2:4] == ["Walden", "1854-08-09"]
    assert table[3].split()[2:4] == ["-", "-"]
    assert all(len(line) <= 100 for line in table)
    assert hits_table([]) == "(no matches)"


def test_the_table_cuts_long_cells_and_names_the_corpus_of_a_merged_search() -> None:
    long = "a subject far longer than the subject column can hold in one line"
    table = hits_table([chunk(1, {"subject": long}, "x" * 500, corpus="drafts", node="n1")], width=120)
    head, row = table.splitlines()
    assert head.split()[:3] == ["#", "score", "corpus"] and "drafts" in row
    assert "…" in row and long not in row and len(row) <= 120


def test_hit_lines_show_an_archives_section_and_a_merged_hits_corpus_and_node() -> None:
    (line,) = hit_lines(
        [
            chunk(
                1,
                {"document_id": "doc-1", "page": 4, "section_heading": "B. Chatbots"},
                corpus="ais",
                node="id1",
            )
        ],
        {"id1": "host"},
    )
    assert line.splitlines()[0] == " 1. 0.500  [ais @ host]  doc-1 p.4  § B. Chatbots"
