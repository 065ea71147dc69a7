"""E-mail: one message (``.eml``) or a mailbox of them (``.mbox``), by the standard library's
:mod:`email` and :mod:`mailbox`.

A message is a page (``unit: message``, its subject the section) of its text body's paragraphs
(the plain part, else the HTML one's main text); its subject, sender, recipients and date go into
its chunks' metadata (``mail_subject``, ``mail_from``, ``mail_to``, ``mail_date``).  Its attached
files of a format HearthNet reads come after the pages (:class:`~.common.Attachment`): the ingest
makes each a document of its own (at most :data:`~.common.MAX_ATTACHMENTS`).
"""

from __future__ import annotations

import email
import email.policy
import mailbox
import os
import re
import tempfile
from collections.abc import Iterable
from email.message import EmailMessage
from typing import Any

import trafilatura

from hearthnet.contracts import formats
from hearthnet.contracts.formats import Format
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.readers.common import (
    MAX_ATTACHMENTS,
    Attachment,
    Outline,
    Parts,
    TextBudget,
    done,
    unreadable,
)

__all__ = ["eml", "mbox", "message_fields"]

_PARAGRAPHS = re.compile(r"\n[^\S\n]*\n")
_FIELD = 200
_HEADERS = ("subject", "from", "to", "date")


def message_fields(message: EmailMessage) -> list[tuple[str, str]]:
    """``mail_subject``, ``mail_from``, ``mail_to``, ``mail_date`` of ``message`` (those it has)."""
    out: list[tuple[str, str]] = []
    for name in _HEADERS:
        try:
            value = message.get(name)
        except Exception:  # a malformed header the policy cannot parse
            value = None
        text = " ".join(str(value).split())[:_FIELD] if value is not None else ""
        if text:
            out.append((f"mail_{name}", text))
    return out


def _body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = part.get_content()
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        return trafilatura.extract(content, favor_recall=True) or ""
    return content


def _attachments(message: EmailMessage, into: list[Attachment]) -> None:
    for part in message.iter_attachments():
        name = part.get_filename() or ""
        data = part.get_payload(decode=True)
        if len(into) < MAX_ATTACHMENTS and isinstance(data, bytes) and data and formats.by_suffix(name):
            into.append(Attachment(" ".join(name.replace("/", " ").split())[:255], data))


def _add(outline: Outline, message: EmailMessage) -> None:
    fields = message_fields(message)
    subject = dict(fields).get("mail_subject")
    outline.section_break([*fields, *((("section", subject),) if subject else ())])
    for paragraph in _PARAGRAPHS.split(_body(message).replace("\r\n", "\n")):
        outline.paragraph(paragraph)


def _read(
    fmt: Format, messages: Iterable[EmailMessage], filename_hint: str | None, title: str | None
) -> Parts:
    outline = Outline(TextBudget(fmt), unit="message")
    count = 0
    attached: list[Attachment] = []
    try:
        for message in messages:
            count += 1
            _add(outline, message)
            _attachments(message, attached)
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    if count == 0:
        raise BadRequest(f"not a readable {fmt.label} file: it holds no message")
    yield from done(fmt, title, filename_hint, outline.pages())
    yield from attached


def eml(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.EML
    try:
        message: Any = email.message_from_bytes(data, policy=email.policy.default)
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    if not any(k.lower() in _HEADERS for k in message.keys()):
        raise BadRequest("not a readable e-mail file: it has no message headers; save the message as .eml")
    subject = dict(message_fields(message)).get("mail_subject")
    return _read(fmt, [message], filename_hint, subject)


def mbox(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.MBOX
    if not data.startswith(b"From "):
        raise BadRequest('not a readable mbox file: it does not start with a "From " line')
    fd, path = tempfile.mkstemp(suffix=".mbox")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        box = mailbox.mbox(path, factory=_message, create=False)  # type: ignore[arg-type]
        try:
            messages: Iterable[Any] = box.itervalues()
            yield from _read(fmt, messages, filename_hint, None)
        finally:
            box.close()
    finally:
        os.unlink(path)


def _message(f: Any) -> EmailMessage:
    parsed: Any = email.message_from_binary_file(f, policy=email.policy.default)
    return parsed  # type: ignore[no-any-return]
