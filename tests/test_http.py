"""The HTTP transport: loopback by default, bearer token when configured, Host/Origin validated."""

from __future__ import annotations

import os
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
