"""Render the demo documents (our own text) to small PDFs in hearthnet/demo/.

A minimal PDF writer: one Helvetica text stream per page, so pypdf extracts
the text exactly.  Run `python -m hearthnet.demo.make_pdfs` after editing the text.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

OUT = Path(__file__).resolve().parent

DOCS: dict[str, tuple[str, list[str]]] = {
    "heating_handbook.pdf": (
        "Heating and Hot Water Handbook",
        [
            "The gas boiler in the utility room heats the radiators and the hot water cylinder. "
            "It is serviced every year in early October by a registered engineer, before the cold season. "
            "The service record is kept in the blue folder on the shelf above the boiler.\n\n"
            "If the boiler pressure gauge shows less than one bar, top it up with the filling loop under the "
            "boiler: open both valves slowly until the needle reaches 1.5 bar, then close them firmly.",
            "Radiators that are cold at the top need bleeding. Use the radiator key from the kitchen drawer, "
            "turn the bleed valve a quarter turn and close it as soon as water appears.\n\n"
            "The thermostat in the hall is set to 19 degrees during the day and 16 degrees at night. "
            "During holidays the frost setting keeps the house above 7 degrees.",
            "Emergency: if you smell gas, do not switch anything on or off. Open the windows, turn off the "
            "gas at the meter next to the front door, leave the house and call the gas emergency line.",
        ],
    ),
    "solar_and_battery.pdf": (
        "Solar Panels and Home Battery",
        [
            "Twelve solar panels on the south roof produce up to 4.8 kilowatts on a clear summer day. "
            "The inverter in the attic converts their direct current for the house.\n\n"
            "The home battery in the garage stores 10 kilowatt hours. It charges from the panels during the "
            "day and feeds the fridge, the lights and the network equipment through the evening.",
            "In winter the battery also charges from the grid at night, when electricity is cheapest, "
            "between one and five in the morning.\n\n"
            "Clean the panels once a year in spring with soft water and a long brush; "
            "never use a pressure washer. "
            "If the inverter display shows error 31, switch it off for one minute and on again.",
        ],
    ),
    "garden_and_seeds.pdf": (
        "Garden Calendar and Seed Storage",
        [
            "Seeds are stored in airtight glass jars in the cellar, where it stays cool and dark all year. "
            "Each jar carries a label with the variety and the year of harvest. Bean and pea seeds keep for "
            "three years; onion and parsnip seeds only for one.\n\n"
            "Tomatoes are sown indoors in the middle of March and planted out after the last frost, "
            "usually in the second half of May.",
            "Potatoes go into the ground in April. "
            "Garlic is planted in October and harvested the next July.\n\n"
            "The rain barrels beside the shed hold 600 litres. "
            "In dry summers, water the vegetable beds in the "
            "evening so that less water evaporates.",
        ],
    ),
}


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _page_stream(title: str, body: str, page_no: int) -> bytes:
    lines = [f"BT /F1 16 Tf 72 760 Td ({_escape(title)}) Tj ET"] if page_no == 1 else []
    y = 720
    ops = []
    for paragraph in body.split("\n\n"):
        for line in textwrap.wrap(paragraph, 88):
            ops.append(f"BT /F1 11 Tf 72 {y} Td ({_escape(line)}) Tj ET")
            y -= 15
        y -= 12
    ops.append(f"BT /F1 9 Tf 290 40 Td (Page {page_no}) Tj ET")
    return "\n".join(lines + ops).encode("latin-1")


def write_pdf(path: Path, title: str, pages: list[str]) -> None:
    objects: list[bytes] = []
    n_pages = len(pages)
    # 1 catalog, 2 pages, 3 font, then (page, content) pairs
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n_pages))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    for i, body in enumerate(pages):
        content = _page_stream(title, body, i + 1)
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    info = f"/Info << /Title ({_escape(title)}) >>"
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R {info} >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (title, pages) in DOCS.items():
        write_pdf(OUT / name, title, pages)
        print(OUT / name)


if __name__ == "__main__":
    main()
