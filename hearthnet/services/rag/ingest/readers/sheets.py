"""Spreadsheets: Excel (openpyxl), OpenDocument (odfdo) and CSV (the standard library's csv).

A sheet is a page (a CSV file one sheet, named after the file); each row with a value is a line
of its cells with their column names ("Name: Alice; Age: 30"), the column names being the first
row with a value, and is numbered as the sheet numbers it.  Empty rows and columns declared but
holding nothing cost no work: rows and columns are bounded (:data:`.common.MAX_ROWS`,
:data:`.common.MAX_COLUMNS`).
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable, Sequence
from typing import Any

import openpyxl

from hearthnet.contracts import formats
from hearthnet.contracts.formats import Format
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.read import PageText, clean
from hearthnet.services.rag.ingest.readers.common import (
    MAX_COLUMNS,
    MAX_ROWS,
    Parts,
    TextBudget,
    done,
    open_zip,
    stem,
    unreadable,
)
from hearthnet.services.rag.ingest.readers.opendocument import open_odf

__all__ = ["csv_file", "ods", "xlsx"]

Row = tuple[int, Sequence[Any]]
"""A row's number in its sheet (from 1) and its cells' values."""


class _Sheet:
    """One sheet's rows as lines ``Column: value; ...``, each line's offset and row number kept."""

    def __init__(self, fmt: Format, budget: TextBudget, rows_seen: list[int]) -> None:
        self._fmt = fmt
        self._budget = budget
        self._seen = rows_seen
        self._names: list[str] | None = None
        self._lines: list[str] = []
        self._marks: list[tuple[int, int]] = []
        self._offset = 0

    def add(self, number: int, values: Sequence[Any]) -> None:
        self._seen[0] += 1
        if self._seen[0] > MAX_ROWS:
            raise BadRequest(
                f"the {self._fmt.label} file has more than {MAX_ROWS:,} rows: split it into smaller files"
            )
        cells = [_cell(v) for v in values[:MAX_COLUMNS]]
        if not any(cells):
            return
        if self._names is None:
            self._names = [c or f"column {i + 1}" for i, c in enumerate(cells)]
            line = "; ".join(c for c in cells if c)
        else:
            line = "; ".join(f"{self._name(i)}: {c}" for i, c in enumerate(cells) if c)
        line = clean(line)
        if self._lines:
            self._offset += 1
        self._marks.append((self._offset, number))
        self._lines.append(line)
        self._offset += len(line)
        self._budget.add(len(line) + 1)

    def _name(self, i: int) -> str:
        assert self._names is not None
        return self._names[i] if i < len(self._names) else f"column {i + 1}"

    def page(self, number: int, name: str) -> PageText:
        place: tuple[tuple[str, str | int], ...] = (("unit", "sheet"), ("section", clean(name)[:200]))
        return PageText(
            page=number, text="\n".join(self._lines), place=place, marks=tuple(self._marks), mark="row"
        )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime.datetime) and value.time() == datetime.time(0):
        value = value.date()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).split())


def _sheets(fmt: Format, sheets: Iterable[tuple[str, Iterable[Row]]]) -> list[PageText]:
    budget = TextBudget(fmt)
    seen = [0]
    pages: list[PageText] = []
    for number, (name, rows) in enumerate(sheets, start=1):
        sheet = _Sheet(fmt, budget, seen)
        for row_number, values in rows:
            sheet.add(row_number, values)
        pages.append(sheet.page(number, name))
    return pages


def xlsx(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.XLSX
    open_zip(data, fmt).close()
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            pages = _sheets(fmt, ((ws.title, _xlsx_rows(ws)) for ws in book.worksheets))
            title = book.properties.title
        finally:
            book.close()
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    return done(fmt, title, filename_hint, pages)


def _xlsx_rows(ws: Any) -> Iterable[Row]:
    ws.reset_dimensions()  # what the file declares is not trusted: rows as they are stored
    return enumerate(ws.iter_rows(values_only=True, max_col=MAX_COLUMNS), start=1)


def ods(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.ODS
    document = open_odf(data, fmt)
    try:
        pages = _sheets(fmt, ((t.name or "", _ods_rows(t)) for t in document.body.get_tables()))
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    return done(fmt, None, filename_hint, pages)


def _ods_rows(table: Any) -> Iterable[Row]:
    """The stored rows (a row or cell repeated a million times is one element, read once)."""
    number = 1
    for row in table.get_elements("table:table-row"):
        values: list[Any] = []
        for cell in row.get_elements("table:table-cell"):
            repeat = min(cell.repeated or 1, MAX_COLUMNS - len(values))
            values.extend([cell.value if cell.value is not None else str(cell).strip() or None] * repeat)
            if len(values) >= MAX_COLUMNS:
                break
        yield number, values
        number += row.repeated or 1


def csv_file(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.CSV
    if b"\x00" in data[: 1 << 16]:
        raise BadRequest("not a readable CSV file: it holds binary data (NUL bytes), not text; re-export it")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    if not text.strip():
        raise BadRequest("CSV file contains only whitespace: nothing to index")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel_tab if (filename_hint or "").lower().endswith(".tsv") else csv.excel
    try:
        rows = csv.reader(io.StringIO(text, newline=""), dialect)
        pages = _sheets(fmt, [(stem(filename_hint) or "sheet 1", enumerate(rows, start=1))])
    except csv.Error as exc:
        raise BadRequest(f"not a readable CSV file: {str(exc)[:120]}; re-export it") from exc
    return done(fmt, None, filename_hint, pages)
