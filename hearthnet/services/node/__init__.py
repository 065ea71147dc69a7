"""Built-in ``node.*`` capabilities: ping, info, stats, status."""

from hearthnet.services.node.service import NodeService

__all__ = ["NodeService"]
