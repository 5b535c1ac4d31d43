"""A long argument cannot wedge the server: reproduce with a huge command is refused at once, and a ping sent
meanwhile is answered at once.

    .venv/bin/python bench/bench_limits.py

A real `rootcause serve` is spoken to over its stdin/stdout, one JSON-RPC message per line (protocol
2025-06-18, which still has ping). Each round writes a tools/call of reproduce whose command is SIZE
characters of `x`, then right away a ping, and times (from the moment the call's line is written) the ping's
answer and the call's refusal; ROUNDS rounds per size, medians reported. Before issue 24 the command had no
limit and shlex split it in quadratic time: 300,000 characters took 2 s, 1,000,000 took 12.9 s (the ping
waited 11 s), 3,000,000 took 134 s. Goal for 3,000,000: refused in under 1 s, the ping answered within 100 ms.
The hostile-text row is an 80,000-character word of `a-a-...` (under the limit): split, not found, its error
redacted (redaction took 74 s for 20,000 such characters before).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = (300_000, 1_000_000, 3_000_000)
ROUNDS = 5
GOAL = {"refused_s": 1.0, "ping_ms": 100.0}


class Server:
    def __init__(self, root: Path) -> None:
        exe = Path(sys.executable).parent / "rootcause"
        self.proc = subprocess.Popen([str(exe if exe.exists() else shutil.which("rootcause")), "serve", "--root",
                                      str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def write(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, method: str, params: dict) -> int:
        self.next_id += 1
        self.write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def read(self) -> dict:
        assert self.proc.stdout is not None
        while True:
            message = json.loads(self.proc.stdout.readline())
            if "id" in message:
                return message

    def request(self, method: str, params: dict) -> dict:
        sent = self.send(method, params)
        answer = self.read()
        assert answer["id"] == sent, answer
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def _round(server: Server, command: str) -> dict:
    started = time.monotonic()
    call = server.send("tools/call", {"name": "reproduce", "arguments": {"command": command}})
    written = time.monotonic()
    ping = server.send("ping", {})
    times: dict[int, float] = {}
    answers: dict[int, dict] = {}
    while len(answers) < 2:
        answer = server.read()
        times[answer["id"]] = time.monotonic()
        answers[answer["id"]] = answer
    text = answers[call]["result"]["content"][0]["text"]
    return {"refused_s": times[call] - started, "ping_ms": (times[ping] - written) * 1000,
            "write_s": written - started, "text": text, "is_error": answers[call]["result"].get("isError", False)}


def main() -> dict:
    root = Path(tempfile.mkdtemp(prefix="rc-bench-limits-"))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    server = Server(root)
    rows: dict[str, dict] = {}
    try:
        server.request("tools/list", {})
        _round(server, "x" * 1000)  # warm-up: reproduce's engine imported
        cases = [(f"{size:,} x", "x" * size) for size in SIZES] + [("80,000 a-a-... (hostile text)", "a-" * 40_000)]
        for label, command in cases:
            done = [_round(server, command) for _ in range(ROUNDS)]
            rows[label] = {
                "refused_s": round(statistics.median(d["refused_s"] for d in done), 3),
                "refused_s_rounds": [round(d["refused_s"], 3) for d in done],
                "ping_ms": round(statistics.median(d["ping_ms"] for d in done), 1),
                "ping_ms_rounds": [round(d["ping_ms"], 1) for d in done],
                "write_s": round(statistics.median(d["write_s"] for d in done), 3),
                "answer": done[0]["text"][:100], "is_error": done[0]["is_error"],
            }
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()[0]
    for label, row in rows.items():
        print(f"reproduce, command of {label}: refused after {row['refused_s']} s (rounds {row['refused_s_rounds']}; "
              f"{row['write_s']} s of it writing the line), ping answered {row['ping_ms']} ms after "
              f"(rounds {row['ping_ms_rounds']}): {row['answer']!r}")
    big = rows[f"{SIZES[-1]:,} x"]
    ok = big["refused_s"] < GOAL["refused_s"] and big["ping_ms"] < GOAL["ping_ms"]
    print(f"goal for {SIZES[-1]:,} characters: refused < {GOAL['refused_s']} s and ping < {GOAL['ping_ms']:g} ms: "
          f"{'met' if ok else 'MISSED'} (load average {load:.1f} on {os.cpu_count()} CPUs)")
    return {"rows": rows, "goal_met": ok, "load_average": load}


if __name__ == "__main__":
    main()
