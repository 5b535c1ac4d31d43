"""The streamable-HTTP transport: loopback by default; other binds need ROOTCAUSE_TOKEN."""

from __future__ import annotations

import ipaddress
import os
import sys

from mcp.server.mcpserver import MCPServer


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_http(app: MCPServer, host: str, port: int) -> int:
    if not is_loopback(host) and not os.environ.get("ROOTCAUSE_TOKEN"):
        print(f"error: refusing to bind {host}: rootcause runs commands, so only loopback is allowed "
              "without a token. Hint: set ROOTCAUSE_TOKEN to require 'Authorization: Bearer <token>', "
              "or bind 127.0.0.1.", file=sys.stderr)
        return 2
    app.run("streamable-http", host=host, port=port)
    return 0
