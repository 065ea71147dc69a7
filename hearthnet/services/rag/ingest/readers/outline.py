"""Markdown (markdown-it-py): sections by its headings, paragraphs, list items and table rows."""

from __future__ import annotations

from markdown_it import MarkdownIt

from hearthnet.contracts import formats
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.readers.common import Outline, Parts, TextBudget, done

__all__ = ["markdown"]

_BLOCKS = {"paragraph_open", "fence", "code_block", "html_block"}


def markdown(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.MARKDOWN
    if max_text_bytes is not None and len(data) > max_text_bytes:
        raise BadRequest(
            f"text file is {len(data) / (1 << 20):.1f} MiB; at most {max_text_bytes / (1 << 20):g} MiB of "
            "text are supported: split it into smaller files"
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise BadRequest("Markdown file is not UTF-8 text; save it as UTF-8") from exc
    if not text.strip():
        raise BadRequest("text file contains only whitespace: nothing to index")
    lines = text.splitlines()
    outline = Outline(TextBudget(fmt, max_text_bytes))
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            outline.heading(int(token.tag[1:]), tokens[i + 1].content)
        elif token.map is not None and (token.type in _BLOCKS or token.type == "tr_open"):
            start, end = token.map
            outline.paragraph("\n".join(lines[start:end]))
    return done(fmt, outline.first_heading, filename_hint, outline.pages())
