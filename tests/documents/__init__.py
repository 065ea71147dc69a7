"""Whole real documents through the real readers, and the real OCR engine on real scans.

In-process like the unit tests, but each test spends seconds to tens of seconds of CPU on real
work: every shared PDF parsed, read or chunked, pages rendered and recognised by RapidOCR.
``make test`` (and CI) runs them; ``make test-fast`` (``tests/unit`` alone) leaves them out of the
edit loop.
"""
