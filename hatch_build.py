"""Build hook: the top-level folders server/, tools/ and prompts/ install as rootcause.server, rootcause.tools
and rootcause.prompts, so no bare `tools` or `server` module comes from rootcause and a user's own `tools/`
(mmdetection, Megatron-LM, PyTorch ship one) can never shadow it.

A wheel maps each folder under rootcause/. An editable install gets only a rootcause/__init__.py whose package
path is the checkout, so it imports the same names from the working tree (hatchling's own editable mode
refuses a sources mapping that adds a prefix).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FOLDERS = ("server", "tools", "prompts")
DOC = '"""rootcause: an MCP server and CLI that gives coding agents a disciplined debugging protocol as tools."""\n'


class NamespaceHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        init = os.path.join(tempfile.mkdtemp(prefix="rootcause-build-"), "__init__.py")
        with open(init, "w", encoding="utf-8") as fh:
            fh.write(DOC if version != "editable" else DOC + f"__path__ = [{self.root!r}]\n")
        if version == "editable":
            build_data["force_include_editable"] = {init: "rootcause/__init__.py"}
            return
        build_data["force_include"] = {init: "rootcause/__init__.py",
                                       **{os.path.join(self.root, f): f"rootcause/{f}" for f in FOLDERS}}
