"""A document's way into a corpus: :mod:`.read` (bytes -> pages: PDF, text, Markdown) ->
:mod:`.document` (page by page, each page -> chunks by :mod:`.chunk`; a scanned page is read off its
image on the way by :mod:`.ocr`) -> :mod:`.embed` (``embed.text``
over the bus, while later pages are still read) -> :mod:`.flow` (the atomic write to the store,
then the announcement)."""
