"""Front doors: the ways people and programs reach a node (control socket, CLI, web UI, the
OpenAI-compatible gateway and MCP).

``hearthnet node run`` gives the node the servers among them (:mod:`.doors`: the control
socket, the web UI) as factories, started after its services; they reach the services only
through the bus.  Policy the doors share (which node hosts a corpus, every corpus of the mesh,
which corpora a caller may search) lives in :mod:`hearthnet.frontends.client.corpora`, not in
one door.
"""
