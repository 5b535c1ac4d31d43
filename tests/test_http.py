"""The HTTP transport: loopback by default, bearer token when configured, Host/Origin validated."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest

from tests.conftest import rootcause_executable, structured

pytestmark = pytest.mark.anyio
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def http_server(root: Path, token: str | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    port = free_port()
    env = {**os.environ}
    env.pop("ROOTCAUSE_TOKEN", None)
    if token:
        env["ROOTCAUSE_TOKEN"] = token
    proc = subprocess.Popen([rootcause_executable(), "serve", "--root", str(root), "--transport", "http",
                             "--host", host, "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read().decode()) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_non_loopback_bind_refused_without_token(repo: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROOTCAUSE_TOKEN"}
    proc = subprocess.run([rootcause_executable(), "serve", "--root", str(repo), "--transport", "http",
                           "--host", "0.0.0.0", "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert "refusing to bind 0.0.0.0" in proc.stderr and "ROOTCAUSE_TOKEN" in proc.stderr


def test_token_required_and_origin_checked(repo: Path) -> None:
    with http_server(repo, token="s3cret") as url:
        assert httpx2.post(url, json=INIT, headers=HEADERS).status_code == 401
        assert httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "Bearer wrong"}).status_code == 401
        ok = httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "Bearer s3cret"})
        assert ok.status_code == 200, ok.text
        evil = httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "Bearer s3cret",
                                                    "origin": "http://evil.example"})
        assert evil.status_code == 403
        rebinding = httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "Bearer s3cret",
                                                         "host": "evil.example:80"})
        assert rebinding.status_code == 421


async def test_http_client_session_with_token(repo: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with http_server(repo, token="tok") as url:
        http = create_mcp_http_client(headers={"authorization": "Bearer tok"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            data = structured(await client.call_tool("start_session", {"symptom": "loss is NaN"}))
            assert data["category"] == "nonfinite"


def _serve_and_read_url(root: Path, *args: str, token: str | None = None) -> tuple[subprocess.Popen, str]:
    """`serve --transport http` with the given options; the URL it prints on stderr once it listens."""
    env = {k: v for k, v in os.environ.items() if k != "ROOTCAUSE_TOKEN"}
    if token:
        env["ROOTCAUSE_TOKEN"] = token
    proc = subprocess.Popen([rootcause_executable(), "serve", "--root", str(root), "--transport", "http", *args],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], 30)
    line = proc.stderr.readline() if ready else ""
    match = re.search(r"at (http://\S+/mcp) ", line)
    if not match:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"serve printed no URL within 30 s: {line!r}")
    return proc, match.group(1)


def test_serve_says_where_it_listens(repo: Path) -> None:
    proc, url = _serve_and_read_url(repo, "--port", "0")
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url) and not url.endswith(":0/mcp"), url
        assert httpx2.post(url, json=INIT, headers=HEADERS).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_another_loopback_address_serves_and_a_lower_case_bearer_is_accepted(repo: Path) -> None:
    """--host 127.0.0.2 binds and answers (every request got 421: its Host header was not allowed); the auth
    scheme is case-insensitive (RFC 7235), the token is not."""
    proc, url = _serve_and_read_url(repo, "--host", "127.0.0.2", "--port", "0", token="s3cret")
    try:
        assert url.startswith("http://127.0.0.2:")
        for scheme in ("bearer", "BEARER", "Bearer"):
            answer = httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": f"{scheme} s3cret"})
            assert answer.status_code == 200, (scheme, answer.status_code, answer.text)
        assert httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "bearer S3CRET"}).status_code == 401
        assert httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "Basic s3cret"}).status_code == 401
        assert httpx2.post(url, json=INIT, headers={**HEADERS, "authorization": "bearer s3cret",
                                                    "host": "evil.example:80"}).status_code == 421
    finally:
        proc.terminate()
        proc.wait(timeout=10)
