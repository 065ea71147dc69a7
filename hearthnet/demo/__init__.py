"""The demo (``make demo``, ``python -m hearthnet.demo``): three nodes on 127.0.0.1, the PDFs beside
this file, and :mod:`hearthnet.demo.make_pdfs`, which renders them from its own text."""
