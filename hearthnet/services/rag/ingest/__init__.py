"""A document's way into a corpus: :mod:`.read` (bytes -> pages: PDF, text, Markdown) ->
:mod:`.document` (page by page, each page -> chunks by :mod:`.chunk`; a per-page step such as OCR
of a page without a text layer goes where each page is taken) -> :mod:`.embed` (``embed.text``
over the bus, while later pages are still read) -> :mod:`.flow` (the atomic write to the store,
then the announcement)."""
