"""The streamable-HTTP transport.

rootcause runs commands, so the HTTP endpoint is guarded: it binds loopback unless a token
is configured (ROOTCAUSE_TOKEN), then every request must carry `Authorization: Bearer
<token>`; Host and Origin headers are validated against the bind address (DNS rebinding).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import sys

from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_ENV = "ROOTCAUSE_TOKEN"


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
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
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
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        hosts.append(f"{host}:*")
        origins += [f"http://{host}:*", f"https://{host}:*"]
    extra = [h.strip() for h in os.environ.get("ROOTCAUSE_ALLOWED_HOSTS", "").split(",") if h.strip()]
    hosts += [f"{h}:*" for h in extra]
    origins += [f"http://{h}:*" for h in extra] + [f"https://{h}:*" for h in extra]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def build_http_app(app: Server, host: str, port: int, token: str | None) -> ASGIApp:
    asgi: ASGIApp = app.streamable_http_app(transport_security=security_settings(host, port), host=host)
    if token:
        asgi = BearerTokenMiddleware(asgi, token)
    return asgi


def serve_http(app: Server, host: str, port: int) -> int:
    token = os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        print(f"error: refusing to bind {host}: rootcause runs commands, so only loopback is allowed without a "
              f"token. Hint: set {TOKEN_ENV} to require 'Authorization: Bearer <token>', or bind 127.0.0.1.",
              file=sys.stderr)
        return 2
    import uvicorn

    uvicorn.run(build_http_app(app, host, port, token), host=host, port=port, log_level="warning")
    return 0
