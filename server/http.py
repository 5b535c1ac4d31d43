"""The streamable-HTTP transport.

rootcause runs commands, so the HTTP endpoint is guarded: it binds loopback unless a token
is configured (ROOTCAUSE_TOKEN), then every request must carry `Authorization: Bearer
<token>` (the scheme in any case, as RFC 7235 allows); Host and Origin headers are validated
against the bind address (DNS rebinding), whichever loopback address it is. Once bound, the server
says on stderr where it listens: the URL with its port and the /mcp path, and whether a token is needed.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import sys

from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_ENV = "ROOTCAUSE_TOKEN"
PATH = "/mcp"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerTokenMiddleware:
    """Rejects HTTP requests whose Authorization header does not carry the configured token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scheme, _, credentials = dict(scope.get("headers") or []).get(b"authorization", b"").partition(b" ")
            given = credentials.strip(b" ") if scheme.lower() == b"bearer" else b""
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"rootcause: missing or wrong bearer token (set Authorization: Bearer <token>)"})
                return
        await self.app(scope, receive, send)


def security_settings(host: str, port: int) -> TransportSecuritySettings:
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if host not in ("0.0.0.0", "::", "", *(h.split(":*")[0] for h in hosts)):
        # the address it was asked to bind (127.0.0.2 is loopback too), as a client's Host header names it
        named = f"[{host}]" if ":" in host and not host.startswith("[") else host
        hosts.append(f"{named}:*")
        origins += [f"http://{named}:*", f"https://{named}:*"]
    extra = [h.strip() for h in os.environ.get("ROOTCAUSE_ALLOWED_HOSTS", "").split(",") if h.strip()]
    hosts += [f"{h}:*" for h in extra]
    origins += [f"http://{h}:*" for h in extra] + [f"https://{h}:*" for h in extra]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def build_http_app(app: Server, host: str, port: int, token: str | None) -> ASGIApp:
    asgi: ASGIApp = app.streamable_http_app(streamable_http_path=PATH, transport_security=security_settings(host, port),
                                            host=host)
    if token:
        asgi = BearerTokenMiddleware(asgi, token)
    return asgi


def serve_http(app: Server, host: str, port: int, root: str = ".") -> int:
    token = os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        print(f"error: refusing to bind {host}: rootcause runs commands, so only loopback is allowed without a "
              f"token. Hint: set {TOKEN_ENV} to require 'Authorization: Bearer <token>', or bind 127.0.0.1.",
              file=sys.stderr)
        return 2
    import uvicorn

    try:  # bound here, so the line below names the real port (--port 0 picks a free one)
        sock = socket.create_server((host.strip("[]"), port), family=_family(host), reuse_port=False)
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}. Hint: pick another --port "
              "(0 lets the system choose)", file=sys.stderr)
        return 2
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    guard = f"every request needs 'Authorization: Bearer <{TOKEN_ENV}>'" if token else "no token (loopback only)"
    print(f"rootcause: MCP over streamable HTTP at http://{shown}:{bound}{PATH} (root {root}; {guard}; "
          "Ctrl-C to stop)", file=sys.stderr, flush=True)
    config = uvicorn.Config(build_http_app(app, host, bound, token), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host.strip("[]")).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET  # a name (localhost) resolves to IPv4 first
