"""The node's local control channel: the socket server (:mod:`.server`) and its framing
(:mod:`.protocol`), which the client (:mod:`hearthnet.frontends.client`) speaks too."""
