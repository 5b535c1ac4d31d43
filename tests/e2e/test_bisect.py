"""The three bisect tools through the real `rootcause serve` subprocess and the official MCP stdio client."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rootcause.tools.run.interpreters import uv_binary

from tests.conftest import error_text, git, stdio_client, structured
from tests.test_bisect import commit_series, make_click_repo, make_entrypoints_repo, make_history, snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_bisect_tools_over_stdio(tmp_path: Path) -> None:
    root = make_click_repo(tmp_path / "project")
    shas = make_history(root, commits=8, bug_at=5, skip_at=None)
    (root / "scratch.txt").write_text("an untracked edit of the user\n")
    before = (snapshot(root), git(root, "status", "--porcelain"), git(root, "rev-parse", "HEAD"))
    async with stdio_client(root) as client:
        env = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py", "timeout_s": 120}))
        assert env["verdict"] == "version_flips_outcome"
        assert env["env_a"]["outcome"] == "pass" and env["env_b"]["outcome"] == "fail"
        assert env["freeze_diff"] == [{"package": "click", "a": "8.1.8", "b": "8.2.0", "kind": "target"}]

        versions = structured(await client.call_tool("bisect_versions", {
            "package": "click", "good": "8.1.0", "bad": "8.3.0", "command": ["python", "repro.py"]}))
        assert (versions["status"], versions["first_bad"], versions["last_good"]) == ("found", "8.2.0", "8.1.8")
        assert versions["builds"] == len(versions["tested"]) <= 6

        commits = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python check.py"}))
        assert commits["status"] == "found" and commits["first_bad_commit"]["sha"] == shas[4]
        assert "calc.py" in commits["first_bad_commit"]["diff_stat"]

        text = error_text(await client.call_tool("bisect_commits", {
            "good": "--upload-pack=x", "bad": "HEAD", "command": "python check.py"}))
        assert "not a valid ref" in text
    assert (snapshot(root), git(root, "status", "--porcelain"), git(root, "rev-parse", "HEAD")) == before


async def test_importlib_metadata_entry_points_over_stdio(tmp_path: Path) -> None:
    """The real case: a console script calling entry_points()['console_scripts'], importlib-metadata 4.13 -> 5.0.
    Both environments hold the project (its console script and metadata), so the version flips the outcome."""
    root = make_entrypoints_repo(tmp_path / "ep")
    async with stdio_client(root) as client:
        result = await client.call_tool("bisect_env", {
            "package": "importlib-metadata", "version": "5.0.0", "command": "epproj-scripts",
            "expect": "KeyError: 'console_scripts'", "timeout_s": 120, "idle_timeout_s": 60})
        data = structured(result)
        assert data["verdict"] == "version_flips_outcome", data["detail"]
        assert data["env_a"]["project"] == data["env_b"]["project"] == "epproj 0.1.0 (editable)"
        assert all((root / data[side]["path"] / "bin" / "epproj-scripts").is_file() for side in ("env_a", "env_b"))
        assert data["env_b"]["matches_expected"] is True and "console_scripts" in data["env_b"]["error"]
        text = result.content[0].text
        assert text.startswith("bisect_env importlib-metadata==5.0.0: version_flips_outcome")
        assert "A: importlib-metadata==4.13.0; project epproj 0.1.0 (editable) → pass" in text

        broken = structured(await client.call_tool("bisect_env", {
            "package": "importlib-metadata", "version": "5.0.0", "command": "epproj-script"}))
        assert broken["verdict"] == "inconclusive" and "command was not found" in broken["reason"]


@contextmanager
def untrusted_https_index(folder: Path) -> Iterator[str]:
    """A package index on 127.0.0.1 behind a self-signed certificate: uv's TLS handshake really fails."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-subj", "/CN=127.0.0.1", "-days", "1"], check=True, capture_output=True, timeout=60)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


async def test_uv_tls_failure_without_ssl_cert_file_is_inconclusive_over_stdio(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started without SSL_CERT_FILE (an MCP client passes few variables): a reproducer that runs uv fails
    with a real TLS error at both endpoints; the bisect is inconclusive and names the missing variable."""
    root = tmp_path / "tls"
    shas = commit_series(root, ["def add(a, b):\n    return a + b\n"] * 3)
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    with untrusted_https_index(tmp_path) as index:
        command = [uv_binary(), "run", "--no-project", "--no-cache", "--default-index", index, "--with",
                   "six==1.16.0", "python", "check.py"]
        async with stdio_client(root) as client:
            result = await client.call_tool("bisect_commits", {"good": shas[0], "bad": "HEAD", "command": command,
                                                               "timeout_s": 120})
    data = structured(result)
    assert data["status"] == "inconclusive", data["detail"]
    assert "uv could not reach the package index over TLS" in data["reason"]
    assert "SSL_CERT_FILE is not set in the server's environment" in data["reason"]
    assert "invalid peer certificate" in data["reason"] and "first bad" not in data["detail"]
