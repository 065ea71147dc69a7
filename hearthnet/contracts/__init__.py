"""Capability contracts, one module per family (:mod:`.embed`, :mod:`.rag`, :mod:`.file`,
:mod:`.llm`, :mod:`.ocr`, :mod:`.rerank`, :mod:`.answer`, :mod:`.node`): the shapes and limits of
each capability's input and output, the params predicates that decide which provider fits a call,
and the typed clients that services, the composer and the front doors call capabilities through
(a door calls no capability any other way).  Beside them the rules every family shares: the
level each capability needs (:mod:`.levels`) and the document formats read (:mod:`.formats`).
The bus and the wire know none of this.
"""
