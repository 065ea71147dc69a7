"""The MCP front door: the node's tools for agents, over stdio (``hearthnet mcp``, as the owner)
and over streamable HTTP (``/mcp`` on the web UI's server, with an API key's level)."""
