"""Floor 9: around the tools: install into MCP clients, `rootcause init`, the demo and the shipped skill."""
