"""rootcause engines: plain functions over pydantic models, no MCP imports."""
