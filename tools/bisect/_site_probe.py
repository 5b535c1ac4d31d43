"""Run by the base interpreter (any Python 3.8+), never imported by rootcause: what its `site` adds.

Writes JSON to argv[1]: the site folders `site` processed (the interpreter's own, the user site, a venv's
system site), each .pth file there line by line as `site.addpackage` reads it (a path line is joined to
its folder and counts only when it exists; a line starting with `import` is executed), the distributions
installed in each folder (with the .pth files their RECORD lists, and whether they are editable), and the
resulting sys.path. Imports only the standard library.
"""

import csv
import json
import os
import site
import sys


def _distributions(folder):
    found = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for entry in names:
        if not entry.endswith(".dist-info"):
            continue
        meta = os.path.join(folder, entry)
        name, version = entry[: -len(".dist-info")], None
        try:
            with open(os.path.join(meta, "METADATA"), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Name:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
                    elif not line.strip():
                        break
        except OSError:
            pass
        pth = []
        try:
            with open(os.path.join(meta, "RECORD"), encoding="utf-8", errors="replace", newline="") as fh:
                for row in csv.reader(fh):
                    if row and row[0].endswith(".pth") and "/" not in row[0]:
                        pth.append(row[0])
        except OSError:
            pass
        editable = None
        try:
            with open(os.path.join(meta, "direct_url.json"), encoding="utf-8") as fh:
                direct = json.load(fh)
            if isinstance(direct, dict) and (direct.get("dir_info") or {}).get("editable"):
                editable = direct.get("url")
        except (OSError, ValueError):
            pass
        found.append({"name": name, "version": version, "pth": pth, "editable": editable})
    return found


def _pth_files(folder):
    out = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return out
    for name in names:
        lines = []
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
                raw = fh.read().splitlines()
        except OSError:
            continue
        for number, text in enumerate(raw, 1):
            stripped = text.rstrip()
            if not stripped.strip() or stripped.startswith("#"):
                continue
            if stripped.startswith(("import ", "import\t")):
                lines.append({"line": number, "kind": "import", "text": stripped})
                continue
            path = os.path.abspath(os.path.join(folder, stripped))
            lines.append({"line": number, "kind": "path", "text": stripped, "path": path,
                          "exists": os.path.exists(path)})
        out.append({"name": name, "lines": lines})
    return out


def main():
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    folders = []
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user and os.path.isdir(user):
        folders.append((user, "user"))
    for folder in site.getsitepackages():
        own = not in_venv or os.path.realpath(folder).startswith(os.path.realpath(sys.prefix) + os.sep)
        folders.append((folder, "own" if own else "system"))
    report = {
        "python": sys.executable, "version": list(sys.version_info[:3]), "prefix": sys.prefix, "venv": in_venv,
        "sys_path": [p for p in sys.path if p], "folders": [],
    }
    for folder, kind in folders:
        if not os.path.isdir(folder):
            continue
        report["folders"].append({"path": folder, "kind": kind, "pth": _pth_files(folder),
                                  "distributions": _distributions(folder)})
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump(report, fh)


main()
