"""Released versions of a package, read from the package index that uv installs from.

uv has no command that lists versions, so this reads the index's Simple API (PEP 691 JSON,
falling back to the PEP 503 HTML page) at the URL uv would use: UV_DEFAULT_INDEX, else
UV_INDEX_URL, else PyPI. A version counts as yanked when every one of its files is.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
from dataclasses import dataclass

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

PYPI_SIMPLE = "https://pypi.org/simple"
_ANCHOR = re.compile(r"<a\s([^>]*)>([^<]*)</a>", re.IGNORECASE)


class IndexError_(Exception):
    """The index could not be read (offline, unknown package, bad URL)."""


@dataclass(frozen=True)
class Release:
    version: Version
    yanked: bool
    yanked_reason: str | None = None


def index_url() -> str:
    return (os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or PYPI_SIMPLE).rstrip("/")


def _file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        return None


def _files_from_html(text: str) -> list[dict]:
    files = []
    for attrs, label in _ANCHOR.findall(text):
        yanked = re.search(r"data-yanked(?:=\"([^\"]*)\")?", attrs)
        files.append({"filename": html.unescape(label.strip()),
                      "yanked": (html.unescape(yanked.group(1) or "") or True) if yanked else False})
    return files


def _fetch(url: str, timeout_s: float) -> list[dict]:
    import urllib.error
    import urllib.request  # here, not at import: the server's start-up stays lean

    request = urllib.request.Request(url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1", "User-Agent": "rootcause-bisect"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read().decode("utf-8", "replace")
            kind = response.headers.get("Content-Type", "") if hasattr(response, "headers") else ""
    except urllib.error.HTTPError as exc:
        raise IndexError_(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise IndexError_(f"{url}: {reason}") from None
    if "json" in kind or body.lstrip().startswith("{"):
        return json.loads(body).get("files", [])
    return _files_from_html(body)


def _list_sync(package: str, url: str, timeout_s: float) -> list[Release]:
    page = f"{url}/{package}/"
    try:
        files = _fetch(page, timeout_s)
    except IndexError_:
        if not page.startswith("file:"):
            raise
        files = _fetch(page + "index.html", timeout_s)
    by_version: dict[Version, list[str | bool]] = {}
    for entry in files:
        found = _file_version(entry.get("filename", ""))
        if found is not None:
            by_version.setdefault(found, []).append(entry.get("yanked") or False)
    if not by_version:
        raise IndexError_(f"{page}: no release files for {package!r}")
    releases = []
    for found, marks in sorted(by_version.items()):
        yanked = all(marks)
        reason = next((m for m in marks if isinstance(m, str)), None) if yanked else None
        releases.append(Release(found, yanked, reason))
    return releases


async def list_releases(package: str, url: str | None = None, timeout_s: float = 30.0) -> list[Release]:
    """Every release of `package` on the index, in PEP 440 order; IndexError_ when it cannot be read."""
    return await asyncio.to_thread(_list_sync, package, (url or index_url()).rstrip("/"), timeout_s)


def between(releases: list[Release], low: Version, high: Version, *, prereleases: bool,
            yanked: bool, keep: tuple[Version, ...] = ()) -> tuple[list[Version], list[str]]:
    """Versions in [low, high] (PEP 440 order) and the reasons some were left out; `keep` always stays."""
    chosen: list[Version] = []
    skipped: list[str] = []
    for release in releases:
        v = release.version
        if not low <= v <= high:
            continue
        if v in keep:
            chosen.append(v)
        elif release.yanked and not yanked:
            skipped.append(f"{v} (yanked{': ' + release.yanked_reason if release.yanked_reason else ''})")
        elif (v.is_prerelease or v.is_devrelease) and not prereleases:
            skipped.append(f"{v} (pre-release)")
        else:
            chosen.append(v)
    return chosen, skipped
