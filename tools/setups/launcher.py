"""Distributed launch settings read from a command line or a shell script.

An invocation is unwrapped layer by layer (env NAME=v, uv run, srun, torchrun, accelerate
launch, deepspeed, mpirun, python -m torch.distributed.run) down to the program and its
arguments. Every launcher option is kept; the ones that decide the process layout are also
named canonically (nproc_per_node, nnodes, num_processes, world_size, backend) so that a
launcher switch (torchrun -> accelerate) still compares setting by setting.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

# Options that take no value, per launcher (everything else consumes the next word unless it starts with '-').
_FLAGS: dict[str, set[str]] = {
    "torchrun": {"standalone", "no_python", "module", "m", "run_path", "log_line_prefix_template_off"},
    "accelerate": {"multi_gpu", "use_fsdp", "use_deepspeed", "use_megatron_lm", "use_xpu", "cpu", "debug", "module",
                   "m", "no_python", "quiet", "q", "tpu", "same_network", "rdzv_conf_off", "dynamo_use_fullgraph"},
    "deepspeed": {"no_ssh_check", "no_local_rank", "no_python", "module", "force_multi", "save_pid",
                  "enable_each_rank_log", "bind_cores_to_rank", "no_ssh"},
    "srun": {"exclusive", "l", "label", "u", "unbuffered", "overcommit", "O", "K", "kill_on_bad_exit", "v", "verbose",
             "Q", "quiet", "pty"},
    "mpirun": {"allow_run_as_root", "oversubscribe", "bind_to_core", "display_map", "tag_output"},
    "uv": {"frozen", "locked", "no_sync", "isolated", "no_project", "all_extras", "no_dev", "quiet", "q", "verbose",
           "v", "offline", "active", "exact", "no_config"},
}
# Launcher option -> canonical distributed setting.
_CANONICAL: dict[str, dict[str, str]] = {
    "torchrun": {"nproc_per_node": "nproc_per_node", "nnodes": "nnodes", "node_rank": "node_rank",
                 "master_addr": "master_addr", "master_port": "master_port"},
    "accelerate": {"num_processes": "num_processes", "num_machines": "nnodes", "machine_rank": "node_rank",
                   "main_process_ip": "master_addr", "main_process_port": "master_port"},
    "deepspeed": {"num_gpus": "nproc_per_node", "num_nodes": "nnodes", "node_rank": "node_rank",
                  "master_addr": "master_addr", "master_port": "master_port"},
    "srun": {"ntasks_per_node": "nproc_per_node", "nodes": "nnodes", "N": "nnodes", "ntasks": "num_processes",
             "n": "num_processes", "gpus_per_node": "gpus_per_node"},
    "mpirun": {"np": "num_processes", "n": "num_processes", "N": "nproc_per_node", "npernode": "nproc_per_node"},
}
_TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
_WRAPPERS = {"exec", "nohup", "time", "command", "stdbuf", "nice", "numactl"}
_PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_BACKEND_ARGS = {"--backend", "--dist_backend", "--dist-backend", "--ddp_backend", "--ddp-backend",
                 "--distributed_backend", "--distributed-backend"}
_BACKEND_ENV = {"TORCH_DISTRIBUTED_BACKEND", "DIST_BACKEND", "BACKEND"}


def _norm(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _split_options(words: list[str], launcher: str) -> tuple[dict[str, str], list[str]]:
    """Leading options of a launcher and the words after them (the wrapped command)."""
    flags = _FLAGS.get(launcher, set())
    options: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "--":
            i += 1
            break
        name, eq, value = word.partition("=")
        key = _norm(name)
        if eq:
            options[key] = value
        elif key in flags or i + 1 >= len(words) or words[i + 1].startswith("-"):
            options[key] = "true"
        else:
            options[key] = words[i + 1]
            i += 1
        i += 1
    return options, words[i:]


def _script_args(words: list[str]) -> dict[str, str]:
    """A program's arguments: --opt value / --opt=value / key=value overrides / positionals."""
    out: dict[str, str] = {}
    positional = 0
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, eq, value = word.partition("=")
            if eq:
                out[f"args.{name}"] = value
            elif i + 1 < len(words) and (_is_number(words[i + 1]) or (
                    word.startswith("--") and not words[i + 1].startswith("-"))):
                # `--opt value`; a short `-x` takes only a number (`-n 4`), so `-x tests/` stays a flag and a path.
                out[f"args.{name}"] = words[i + 1]
                i += 1
            else:
                out[f"args.{name}"] = "true"
        elif "=" in word and re.match(r"^[+~]{0,2}[A-Za-z_][\w.\-/]*=", word):
            name, _, value = word.partition("=")
            out[f"args.{name}"] = value
        else:
            out[f"args[{positional}]"] = word
            positional += 1
        i += 1
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def parse_invocation(words: list[str]) -> dict[str, str]:
    """Settings of one command line: launchers, canonical distributed settings, env, program and arguments."""
    settings: dict[str, str] = {}
    origins: dict[str, str] = {}
    launchers: list[str] = []
    words = list(words)
    while words:
        head = words[0]
        base = head.rsplit("/", 1)[-1]
        if _ASSIGN.match(head):
            name, _, value = head.partition("=")
            settings[f"env.{name}"] = value
            words = words[1:]
        elif base == "env":
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        elif base in _WRAPPERS:
            words = words[1:]
        elif base == "uv" and len(words) > 1 and words[1] == "run":
            _, words = _split_options(words[2:], "uv")
        elif base == "torchrun":
            words = _launcher(settings, origins, launchers, "torchrun", "torchrun", words[1:])
        elif _PYTHON.match(base) and _torchrun_module(words) is not None:
            start = _torchrun_module(words)
            assert start is not None
            words = _launcher(settings, origins, launchers, "torchrun", words[start - 1], words[start:])
        elif base == "accelerate" and len(words) > 1 and words[1] == "launch":
            words = _launcher(settings, origins, launchers, "accelerate", "accelerate launch", words[2:])
        elif base in {"deepspeed", "srun", "mpirun", "mpiexec"}:
            kind = "mpirun" if base == "mpiexec" else base
            words = _launcher(settings, origins, launchers, kind, base, words[1:])
        else:
            break
    if words:
        head = words[0]
        rest = words[1:]
        if _PYTHON.match(head.rsplit("/", 1)[-1]):
            interpreter_opts: list[str] = []
            while rest and rest[0].startswith("-") and rest[0] != "-m":
                interpreter_opts.append(rest.pop(0))
            if rest[:1] == ["-m"] and len(rest) > 1:
                settings["program"] = f"-m {rest[1]}"
                rest = rest[2:]
            elif rest:
                settings["program"] = rest.pop(0)
            settings["interpreter"] = " ".join([head, *interpreter_opts])
        elif any(settings.get(f"{k}.{m}") == "true" for k in ("torchrun", "accelerate", "deepspeed")
                 for m in ("m", "module")):
            settings["program"] = f"-m {head}"
        else:
            settings["program"] = head
        settings.update(_script_args(rest))
    if launchers:
        settings["launcher"] = " > ".join(launchers)
        _derive(settings)
    return settings


def _torchrun_module(words: list[str]) -> int | None:
    """For `python [opts] -m torch.distributed.run ...`: the index after the module name."""
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        i += 1
    if i + 1 < len(words) and words[i] == "-m" and words[i + 1] in _TORCHRUN_MODULES:
        return i + 2
    return None


def _launcher(settings: dict[str, str], origins: dict[str, str], launchers: list[str], kind: str, label: str,
              words: list[str]) -> list[str]:
    options, rest = _split_options(words, kind)
    launchers.append(label)
    canonical = _CANONICAL.get(kind, {})
    for key, value in options.items():
        if key not in canonical:
            settings[f"{kind}.{key}"] = value
            continue
        name = canonical[key]
        if name in origins and not origins[name].startswith(f"{kind}."):
            # An inner launcher decides the layout; the outer one's value is kept under its own name.
            settings[origins[name]] = settings[name]
        settings[name] = value
        origins[name] = f"{kind}.{key}"
    if kind == "torchrun" and options.get("standalone") == "true" and "nnodes" not in settings:
        settings["nnodes"] = "1"
    return rest


def _derive(settings: dict[str, str]) -> None:
    """world_size from the layout, backend from the program's arguments or env."""
    nproc, nnodes, total = settings.get("nproc_per_node"), settings.get("nnodes", "1"), settings.get("num_processes")
    if total and total.isdigit():
        settings["world_size"] = total
    elif nproc and nproc.isdigit() and nnodes.isdigit():
        settings["world_size"] = str(int(nproc) * int(nnodes))
    for key, value in list(settings.items()):
        if key.startswith("args.") and key[5:] in _BACKEND_ARGS:
            settings["backend"] = value
        elif key.startswith("env.") and key[4:] in _BACKEND_ENV:
            settings.setdefault("backend", value)


# ---------------------------------------------------------------- shell scripts

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_OPERATORS = {";", "&&", "||", "|", "&", ";;"}


def _expand(text: str, variables: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(1) and match.group(2) is not None:
            return match.group(2)
        return match.group(0)

    return _VAR.sub(sub, text)


def _logical_lines(text: str) -> list[str]:
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def _simple_commands(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = line.split()
    commands: list[list[str]] = [[]]
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if re.fullmatch(r"[<>&]+", token) and re.search(r"[<>]", token):
            # A redirection: drop it, its target, and a file-descriptor number written before it.
            if commands[-1] and commands[-1][-1].isdigit():
                commands[-1].pop()
            skip_next = True
        elif token in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _is_invocation(words: list[str]) -> bool:
    for word in words:
        if _ASSIGN.match(word):
            continue
        base = word.rsplit("/", 1)[-1]
        return bool(base in {"torchrun", "accelerate", "deepspeed", "srun", "mpirun", "mpiexec", "uv", "env"}
                    or base in _WRAPPERS or _PYTHON.match(base) or base.endswith(".py"))
    return False


def parse_script(text: str) -> tuple[dict[str, str], list[str]]:
    """A shell script's settings (var.*, env.*, and per invocation the launcher settings) and its other commands."""
    variables: dict[str, str] = {}
    exported: set[str] = set()
    settings: dict[str, Any] = {}
    invocations: list[dict[str, str]] = []
    others: list[str] = []
    for raw in _logical_lines(text):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        expanded = _expand(line, variables)
        for words in _simple_commands(expanded):
            if words[0] == "export" or all(_ASSIGN.match(w) for w in words):
                is_export = words[0] == "export"
                for word in words[1:] if is_export else words:
                    name, eq, value = word.partition("=")
                    if eq:
                        variables[name] = value
                    if is_export:
                        exported.add(name)
                continue
            if _is_invocation(words):
                invocations.append(parse_invocation(words))
            elif expanded not in others:
                others.append(expanded)
    for name, value in variables.items():
        settings[f"env.{name}" if name in exported else f"var.{name}"] = value
    for name in exported - set(variables):
        settings[f"env.{name}"] = "(inherited)"
    for index, invocation in enumerate(invocations):
        prefix = "" if len(invocations) == 1 else f"run{index + 1}."
        for key, value in invocation.items():
            settings[f"{prefix}{key}"] = value
    return settings, others
