"""Capability contracts, one module per family (:mod:`.embed`, :mod:`.rag`, :mod:`.file`,
:mod:`.llm`, :mod:`.ocr`): the shapes and limits of each capability's input and output, the params
predicates that decide which provider fits a call, and small typed clients that services, the
composer and the front doors call capabilities through.  The bus and the wire know none of this.
"""
