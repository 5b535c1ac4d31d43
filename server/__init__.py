"""rootcause's MCP wiring: the catalog of tools, prompts and resources, the server, the CLI."""
