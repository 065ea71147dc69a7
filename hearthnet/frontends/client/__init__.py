"""The client of a node's control socket (:mod:`.client`, public as :mod:`hearthnet.client`) and the
policy every front door shares about corpora (:mod:`.corpora`)."""
