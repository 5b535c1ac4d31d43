"""The command line as a person meets it: help, version, standard input, closed pipes, errors and hints
in CLI words, the terminal hint of `serve`, the session list."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import rootcause_executable

LOG = ('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
       "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
TRAINING_LOG = ("".join(f"step={s} loss={2.5 - s / 100:.3f} lr=0.001\n" for s in range(1, 30))
                + "step=30 loss=nan lr=0.001\n")


def rootcause(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([rootcause_executable(), "--root", str(root), *args], input=stdin, capture_output=True,
                          text=True, timeout=120, stdin=None if stdin is not None else subprocess.DEVNULL)


def test_version() -> None:
    from importlib.metadata import version

    done = subprocess.run([rootcause_executable(), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"rootcause {version('rootcause')}"


def test_help_is_whole_and_shows_defaults(repo: Path) -> None:
    text = rootcause(repo, "reproduce", "--help").stdout
    from rootcause.server.catalog import TOOLS

    description = next(t.description for t in TOOLS if t.name == "reproduce")
    assert " ".join(description.split()) in " ".join(text.split())  # the whole description, not a cut line
    assert "(default: 2)" in text and "(default: 900)" in text
    assert "unless --shell" in " ".join(text.split())  # the model says shell=true: the CLI says --shell
    top = rootcause(repo, "--help").stdout
    when = next(t.description for t in TOOLS if t.name == "diagnose_log").partition(": ")[0]
    assert "diagnose-log" in top and when in " ".join(top.split())


@pytest.mark.parametrize("args", [["diagnose-log", "--path", "-"], ["diagnose-log"]])
def test_diagnose_log_reads_standard_input(repo: Path, args: list[str]) -> None:
    done = rootcause(repo, *args, "--json", stdin=LOG)
    assert done.returncode == 0, done.stderr
    assert '"exception_type": "RuntimeError"' in done.stdout
    assert '"category": "cuda_oom"' in done.stdout


@pytest.mark.parametrize("args", [["analyze-training-log", "-"], ["analyze-training-log"]])
def test_analyze_training_log_reads_standard_input(repo: Path, args: list[str]) -> None:
    done = rootcause(repo, *args, "--json", stdin=TRAINING_LOG)
    assert done.returncode == 0, done.stderr
    assert '"first_nonfinite"' in done.stdout and "30" in done.stdout


def test_empty_standard_input_is_a_usage_error(repo: Path) -> None:
    done = rootcause(repo, "diagnose-log", stdin="")
    assert done.returncode == 2
    assert "standard input is empty" in done.stderr


def test_closed_pipe_is_quiet_and_exits_0(repo: Path) -> None:
    """`| head -1` closes the pipe while more than a pipe's buffer (64 KiB) is still to be written: a call that
    worked, so exit 0 (it was 141, or 0 when the output fit the buffer), and nothing on stderr."""
    import shutil

    rootcause(repo, "session", "start", "loss is NaN after step 40")
    sessions = repo / ".rootcause" / "sessions"
    (first,) = sessions.iterdir()
    for n in range(1, 1500):  # 1,500 lines of `session list`, ~150 KB
        shutil.copytree(first, sessions / f"{first.name[:-6]}{n:06x}")
    for _ in range(3):
        done = subprocess.run(["bash", "-c", f"set -o pipefail; {rootcause_executable()} --root {repo} session list "
                                             "| head -1"], capture_output=True, text=True, timeout=120)
        assert "loss is NaN after step 40" in done.stdout, done.stdout
        assert done.stderr == "", done.stderr
        assert done.returncode == 0, done.returncode


def test_each_subcommand_takes_its_main_argument_positionally(repo: Path) -> None:
    """The one main argument (path, symptom, command) goes positionally everywhere; the option still works."""
    (repo / "job.log").write_text(LOG)
    by_path = rootcause(repo, "diagnose-log", "job.log")
    assert by_path.returncode == 0 and "Diagnosis: [cuda_oom]" in by_path.stdout, by_path.stderr
    assert rootcause(repo, "diagnose-log", "--path", "job.log").stdout == by_path.stdout
    by_symptom = rootcause(repo, "check-constraints", "CUDA out of memory")
    assert by_symptom.returncode == 0, by_symptom.stderr
    assert rootcause(repo, "check-constraints", "--symptom", "CUDA out of memory").stdout == by_symptom.stdout
    twice = rootcause(repo, "diagnose-log", "job.log", "--path", "job.log")
    assert twice.returncode == 2 and "--path is given twice" in twice.stderr
    for form in (["capture-knowledge", "none"], ["capture-knowledge", "--kind", "none"]):  # a choice as main argument
        done = rootcause(repo, *form, "--body", "config typo only")
        assert done.returncode == 0 and "no new knowledge to capture" in done.stdout, done.stderr
    wrong = rootcause(repo, "capture-knowledge", "sideways")
    assert wrong.returncode == 2 and "--kind takes one of 'constraint'" in wrong.stderr, wrong.stderr


def test_one_positional_per_subcommand_and_the_same_options_everywhere() -> None:
    from rootcause.server.catalog import TOOLS
    from rootcause.server.cli import build_parser, main_argument

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for spec in TOOLS:
        _, model, _ = spec.load()
        sub = subparsers.choices[spec.name.replace("_", "-")]
        positionals = [a.dest for a in sub._actions if not a.option_strings]
        assert positionals == ([main_argument(model)] if main_argument(model) else []), spec.name
        flags = {a.dest: a.option_strings for a in sub._actions if a.option_strings}
        for name in model.model_fields:  # every argument has its option, named alike in every subcommand
            assert f"--{name.replace('_', '-')}" in flags.get(name, []), (spec.name, name)
    assert {spec.name: main_argument(spec.load()[1]) for spec in TOOLS} == {
        "start_session": "symptom", "reproduce": "command", "diagnose_log": "path", "check_constraints": "symptom",
        "bisect_env": "command", "bisect_versions": "command", "bisect_commits": "command", "compare_setups": None,
        "verify_hypothesis": "command", "record_fix_attempt": "command", "check_collateral": "command",
        "capture_knowledge": "kind", "close_session": "session_id", "inspect_checkpoint": "path",
        "analyze_training_log": "path"}


@pytest.mark.parametrize(("args", "expected"), [
    (["record-fix-attempt", "20200101-000000-abcdef", "default THRESHOLD to 0", "python test.py"],
     "error: record-fix-attempt takes one positional argument, COMMAND; the others are options: rootcause "
     "record-fix-attempt --session-id 20200101-000000-abcdef --description 'default THRESHOLD to 0' 'python test.py'"),
    (["bisect-commits", "HEAD~20", "HEAD", "python repro.py"],
     "error: bisect-commits takes one positional argument, COMMAND; the others are options: rootcause bisect-commits "
     "--good 'HEAD~20' --bad HEAD 'python repro.py'"),
    (["reproduce", "--timout-s", "1", "sleep 5"], "error: reproduce has no option --timout-s; did you mean "
                                                  "--timeout-s? (rootcause reproduce --help)"),
    (["compare-setups", "HEAD~1"], "error: compare-setups takes no positional argument; give 'HEAD~1' with its "
                                   "option (--good, --bad, --focus, --session-id)."),
])
def test_an_unrecognised_argument_gets_the_right_form(repo: Path, args: list[str], expected: str) -> None:
    done = rootcause(repo, *args)
    assert done.returncode == 2
    assert done.stderr.strip() == expected, done.stderr
    assert not (repo / ".rootcause" / "runs").exists()


@pytest.mark.parametrize(("value", "expected"), [
    ("nan", "--timeout-s must be a finite number, not nan: give seconds > 0"),
    ("1e309", "--timeout-s must be a finite number, not inf: give seconds > 0, at most 604800 (7 days)."),
    ("99999999999", "--timeout-s must be > 0 seconds and at most 604800 (7 days), not 1e+11."),
    ("0", "--timeout-s must be > 0 seconds and at most 604800 (7 days), not 0."),
])
def test_absurd_numbers_refused_naming_the_option(repo: Path, value: str, expected: str) -> None:
    done = rootcause(repo, "reproduce", "--timeout-s", value, "true")
    assert done.returncode == 2
    assert expected in done.stderr
    assert not (repo / ".rootcause" / "runs").exists()


def test_hints_speak_cli_on_the_cli(repo: Path) -> None:
    outside = rootcause(repo, "diagnose-log", "--path", "/etc/hostname")
    assert outside.returncode == 2
    assert "--root DIR" in outside.stderr and "rootcause serve" not in outside.stderr
    assert "server" not in outside.stderr
    missing = rootcause(repo, "reproduce", "no-such-program-xyz --flag")
    assert missing.returncode == 2
    assert "--python" in missing.stderr and "python=" not in missing.stderr


@pytest.mark.anyio
async def test_hints_speak_mcp_over_mcp(repo: Path) -> None:
    from tests.conftest import error_text, memory_client

    async with memory_client(repo) as client:
        text = error_text(await client.call_tool("reproduce", {"command": "no-such-program-xyz --flag"}))
    assert "python=" in text and "--python" not in text


def test_serve_in_a_terminal_says_what_it_is(repo: Path) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen([rootcause_executable(), "serve", "--root", str(repo)], stdin=terminal,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([process.stderr], [], [], 30)
        assert ready, "no hint on stderr within 30 s"
        line = process.stderr.readline().decode()
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(controller)
        os.close(terminal)
    assert "speaks MCP over stdin/stdout" in line and "rootcause install --client" in line


def test_serve_from_a_client_prints_nothing(repo: Path) -> None:
    process = subprocess.Popen([rootcause_executable(), "serve", "--root", str(repo)], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.5)
    _, err = process.communicate(input=b"", timeout=30)  # end of input: the server stops
    assert b"speaks MCP" not in err


def test_session_list_shows_status_phase_age_symptom(repo: Path) -> None:
    rootcause(repo, "session", "start", "DataLoader worker hangs at epoch 2")
    rootcause(repo, "session", "start", "loss is NaN\nafter step 40")
    lines = rootcause(repo, "session", "list").stdout.splitlines()
    assert len(lines) == 2
    newest, oldest = lines
    assert newest.endswith("loss is NaN after step 40")  # newest first, one line each
    assert oldest.endswith("DataLoader worker hangs at epoch 2")
    assert " open " in newest and "phase 1 Investigate" in newest and " s ago" in newest


def test_result_text_speaks_cli_on_the_cli(repo: Path) -> None:
    """A result's guidance (its interpreter remark, its next step) names options, not MCP arguments."""
    done = rootcause(repo, "reproduce", "--runs", "1", "python -c 'raise SystemExit(3)'")
    assert done.returncode == 0, done.stderr
    interpreter = next(line for line in done.stdout.splitlines() if line.startswith("Interpreter:"))
    assert "no .venv in the project; pass --python ... for the project's" in interpreter, interpreter
    assert "python=" not in done.stdout and "session_id=" not in done.stdout
    raw = rootcause(repo, "reproduce", "--runs", "1", "--json", "python -c 'raise SystemExit(3)'")
    assert "pass python=... for the project's" in raw.stdout  # --json is the exact structured result
    started = rootcause(repo, "session", "start", "loss is NaN after step 40")
    next_line = started.stdout.splitlines()[-1]
    assert next_line.startswith("Next:") and "check-constraints" in next_line and "check_constraints" not in next_line


@pytest.mark.anyio
async def test_result_text_speaks_mcp_over_mcp(repo: Path) -> None:
    from tests.conftest import memory_client

    async with memory_client(repo) as client:
        result = await client.call_tool("reproduce", {"command": "python -c 'raise SystemExit(3)'", "runs": 1})
    assert "pass python=... for the project's" in result.content[0].text
    assert "--python" not in result.content[0].text


@pytest.mark.parametrize(("command", "spelled"), [("diagnose-log", "-"), ("analyze-training-log", "-")])
def test_log_outside_the_root_offers_standard_input(repo: Path, tmp_path: Path, command: str, spelled: str) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text(LOG if command == "diagnose-log" else TRAINING_LOG)
    args = [command, "--path", str(outside)] if command == "diagnose-log" else [command, str(outside)]
    refused = rootcause(repo, *args)
    assert refused.returncode == 2
    assert "outside the root" in refused.stderr
    suggestion = f"rootcause {command} {spelled} < {outside}"
    assert suggestion in refused.stderr, refused.stderr
    # the suggestion works as printed
    piped = subprocess.run(f"{rootcause_executable()} --root {repo} {command} {spelled} --json < {outside}",
                           shell=True, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert ('"exception_type": "RuntimeError"' if command == "diagnose-log" else '"first_nonfinite"') in piped.stdout
