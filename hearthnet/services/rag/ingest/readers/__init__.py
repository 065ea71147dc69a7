"""The readers of every format besides PDF and plain text, one module per family, each by the
library made for it.  :data:`hearthnet.contracts.formats.FORMATS` names each format's reader
(``"module:function"``); :func:`hearthnet.services.rag.ingest.read.stream_document` calls it, in a
worker process with the limits of :mod:`..isolated`.  A reader takes ``(data, filename_hint,
max_text_bytes, scans_ok)`` and yields a :class:`~..read.DocumentHeader`, then its pages."""
