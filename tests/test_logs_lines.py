"""The one line model: prefixes peeled off real line shapes, streams told apart, tracebacks re-joined."""

from __future__ import annotations

import json
from pathlib import Path

from rootcause.tools.observe.logs.lines import LineModel, clean, iter_lines, split_lines, unflatten


def _texts(text: str) -> list[str]:
    return [ln.text for ln in split_lines(text)]


def test_stacked_prefixes_are_peeled_and_rank_level_kept() -> None:
    lines = split_lines(
        "[rank0]:[titan] 2025-01-04 07:21:10,120 - root - INFO - step: 10  loss: 3.2100\n"
        "[rank1]:[E1206 18:44:12.715298 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective\n"
        "(VllmWorker rank=2 pid=4411) ERROR 03-25 10:38:06 [multiproc_executor.py:435] KeyError: 'w'\n"
        "\x1b[31mERROR\x1b[0m Exception: Expected all tensors to be on the same device\n")
    assert [ln.text for ln in lines][:4] == ["step: 10  loss: 3.2100", "[Rank 1] Watchdog caught collective",
                                         "KeyError: 'w'", "Exception: Expected all tensors to be on the same device"]
    assert [ln.rank for ln in lines][:4] == [0, 1, 2, None]
    assert [ln.level for ln in lines][:4] == ["INFO", "ERROR", "ERROR", "ERROR"]
    assert lines[2].worker == "VllmWorker pid=4411"


def test_a_timestamp_on_every_line_is_decoration_not_a_record_start() -> None:
    log = ("Mar 04 07:21:10 node3 python[2231]: Traceback (most recent call last):\n"
           'Mar 04 07:21:10 node3 python[2231]:   File "/w/train.py", line 4, in <module>\n'
           "Mar 04 07:21:10 node3 python[2231]:     main()\n"
           "Mar 04 07:21:11 node3 python[2231]: ValueError: bad width\n")
    lines = split_lines(log)
    assert [ln.text for ln in lines][:2] == ["Traceback (most recent call last):", '  File "/w/train.py", line 4, '
                                             "in <module>"]
    assert not any(ln.record for ln in lines)
    # Sparse logger lines start records.
    sparse = split_lines("2024-03-04 07:21:10,123 - INFO - start\nplain output\nmore\nmore\n")
    assert sparse[0].record and sparse[0].text == "start" and not sparse[1].record


def test_ambiguous_prefixes_only_when_most_lines_carry_them() -> None:
    srun = "0: hello\n1: world\n0: Traceback (most recent call last):\n"
    assert [ln.rank for ln in split_lines(srun)] == [0, 1, 0, None]
    lone = "Epochs done: 3\n12: not a label\nplain\nplain again\n"
    assert [ln.rank for ln in split_lines(lone)][:2] == [None, None]
    assert "12: not a label" in _texts(lone)
    model = LineModel.detect(["> quoted", "> quoted too", "plain"])
    assert model.split("> x")[0] == "x"
    # pytest's summary lines keep their ERROR.
    assert _texts("ERROR tests/test_a.py::test_b - RuntimeError: boom\n")[0].startswith("ERROR tests/")


def test_flattened_and_escaped_tracebacks_are_unfolded() -> None:
    flat = ('Traceback (most recent call last): File "/w/train.py", line 12, in <module> main() '
            'File "/w/train.py", line 8, in main x = cfg["lr"] KeyError: \'lr\'')
    assert unflatten(flat) == ["Traceback (most recent call last):", '  File "/w/train.py", line 12, in <module>',
                               "    main()", '  File "/w/train.py", line 8, in main', '    x = cfg["lr"]',
                               "KeyError: 'lr'"]
    escaped = '{"error": "Traceback (most recent call last):\\n  File \\"/w/a.py\\", line 3, in f\\nValueError: x"}'
    assert "ValueError: x\"}" in unflatten(escaped)[-1]


def test_lines_hard_wrapped_mid_word_are_joined() -> None:
    width = 70
    long = "RuntimeError: The size of tensor a (4096) must match the size of tensor b (1024) at non-singleton dim 1"
    wrapped = [long[i:i + width] for i in range(0, len(long), width)]
    other = "W0304 07:21:10 warning: " + "grad norm is large; " * 8 + "end"
    text = "\n".join(["Traceback (most recent call last):", '  File "/w/model.py", line 3, in forward',
                      "    return self.proj(x) + y", *wrapped, "", *[other[i:i + width] for i in range(0, 140, width)],
                      other[140:], "after"])
    assert long in _texts(text) and other in _texts(text)
    # Lines that merely share the longest length are left alone.
    assert _texts("x" * 70 + "\n  y\n" + "x" * 70 + "\n  z\n" + "x" * 70 + "\n  w\n") == \
        ["x" * 70, "  y", "x" * 70, "  z", "x" * 70, "  w", ""]


def test_interleaved_tracebacks_without_prefixes_are_demultiplexed() -> None:
    a = ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in step', "    loss = model(x)",
         "RuntimeError: shape mismatch"]
    b = ["Traceback (most recent call last):", '  File "/w/train.py", line 12, in sync', "    dist.barrier()",
         "torch.distributed.DistBackendError: NCCL communicator was aborted"]
    lines = split_lines("\n".join(x for pair in zip(a, b, strict=True) for x in pair))
    by_worker: dict[str | None, list[str]] = {}
    for ln in lines:
        by_worker.setdefault(ln.worker, []).append(ln.text)
    assert by_worker == {"tb1": a, "tb2": b}


def test_streaming_reader_matches_the_whole_text_reader(tmp_path: Path) -> None:
    text = "".join(f"{r}: step {i} loss 1.{i}\n" for i in range(50) for r in (0, 1)) + "\x1b[0m0: done\r\n"
    path = tmp_path / "log.txt"
    path.write_text(text)
    streamed = list(iter_lines(path, sample=10))
    assert [(ln.rank, ln.text) for ln in streamed] == [(ln.rank, ln.text) for ln in split_lines(text)][:len(streamed)]
    assert streamed[-1].text == "done" and clean("a\rb") == "a\nb"


def test_docker_compose_service_prefixes_are_streams() -> None:
    lines = split_lines("trainer-1  | Traceback (most recent call last):\nredis-1    | Ready to accept connections\n"
                        "trainer-1  | ModuleNotFoundError: No module named 'flash_attn'\n"
                        "trainer-1 exited with code 1\n")
    assert [(ln.worker, ln.text) for ln in lines][:3] == [
        ("trainer-1", "Traceback (most recent call last):"), ("redis-1", "Ready to accept connections"),
        ("trainer-1", "ModuleNotFoundError: No module named 'flash_attn'")]
    # A metric table's first column is not a service.
    table = split_lines("Train | Epoch 3 | Loss 0.1\nTrain | Epoch 4 | Loss 0.1\n")
    assert table[0].text == "Train | Epoch 3 | Loss 0.1"


def test_an_exception_naming_a_rank_is_not_a_rank_tag_and_glog_paths_peel() -> None:
    lines = split_lines("RuntimeError: [Rank 2]: Ranks 5, 6 failed to pass monitoredBarrier in 900 ms\n"
                        "node7: [rank3]: step 4\n"
                        "[rank1]:E0425 15:47:00.631000 2164914 site-packages/torch/testing/_internal/"
                        "common_distributed.py:768] Caught exception:\n")
    assert lines[0].rank is None and lines[0].text.startswith("RuntimeError: [Rank 2]: Ranks 5, 6")
    assert (lines[1].rank, lines[1].text) == (3, "step 4")
    assert (lines[2].rank, lines[2].level, lines[2].text) == (1, "ERROR", "Caught exception:")


def test_a_log_pasted_as_an_indented_block_is_dedented() -> None:
    lines = split_lines("  FAILED tests/t.py::test_a - AssertionError\n    detail\n\n  ==== 1 failed ====\n")
    assert [ln.text for ln in lines] == ["FAILED tests/t.py::test_a - AssertionError", "  detail", "",
                                         "==== 1 failed ====", ""]


def test_stamps_of_a_logger_that_stamps_every_write_are_removed_inside_lines() -> None:
    t = "2025-02-03T19:41:07.551255 - "
    log = (f"{t}Traceback (most recent call last):\n"
           f'{t}  File {t}"D:\\app\\run.py"{t}, line {t}327{t}, in {t}execute{t}\n'
           f"{t}    main(){t}\n"
           f"{t}RuntimeError{t}: {t}boom{t}\n")
    assert _texts(log)[:4] == ["Traceback (most recent call last):", '  File "D:\\app\\run.py", line 327, in execute',
                               "    main()", "RuntimeError: boom"]


def test_records_of_one_fixed_width_format_are_not_taken_for_a_wrapped_line() -> None:
    log = "".join(f"Epoch: 6: Step: {555 + 4 * i}/1511, loss={0.5 + i:.6f}, lr=0.000013\n" for i in range(8))
    assert len([t for t in _texts(log) if t]) == 8


def test_a_collectors_stamp_over_the_programs_own_stamp_is_peeled_layer_by_layer() -> None:
    log = ("2024-03-04T07:21:10.100Z 2024-11-02T07:14:55.120Z Traceback (most recent call last):\n"
           '2024-03-04T07:21:10.137Z 2024-11-02T07:14:55.120Z   File "/app/h.py", line 61, in predict\n'
           "2024-03-04T07:21:10.174Z 2024-11-02T07:14:55.121Z RuntimeError: boom\n"
           "2024-03-04T07:21:10.211Z\n")
    lines = split_lines(log)
    assert _texts(log)[:4] == ["Traceback (most recent call last):", '  File "/app/h.py", line 61, in predict',
                               "RuntimeError: boom", ""]
    assert not any(ln.record for ln in lines)
    # The program's glog lines stay record starts under a glog-like stamp on every line.
    stamped = split_lines("".join(f"I0304 07:21:1{i}.000001 2231 t.py:88] {t}\n" for i, t in enumerate(
        ["RuntimeError: boom", "E0811 14:20:17.502000 1399 api.py:826] failed (exitcode: 1)", "more"])))
    assert [ln.record for ln in stamped][:3] == [False, True, False]


def test_a_dash_after_a_stamp_is_content_unless_the_log_writes_stamps_so() -> None:
    stamps = "".join(f"2024-03-04T07:21:1{i}Z {t}\n" for i, t in enumerate(
        ["ValueError: mismatching values:", "- ds bf16.enabled=True vs hf bf16", "The easiest fix is 'auto'."]))
    assert _texts(stamps)[1] == "- ds bf16.enabled=True vs hf bf16"
    comfy = "".join(f"2024-12-31T14:2{i}:31.400121 - {t}\n" for i, t in enumerate(["got prompt", "RuntimeError: x"]))
    assert _texts(comfy)[:2] == ["got prompt", "RuntimeError: x"]


def test_what_a_web_page_or_a_log_collector_encoded_is_decoded() -> None:
    assert _texts("KeyError: &#39;labels&#39; &amp; &quot;x&quot; &lt;3&gt;\n")[0] == "KeyError: 'labels' & \"x\" <3>"
    docker = "".join(json.dumps({"log": t, "stream": "stderr", "time": "2024-03-04T07:21:10Z"}) + "\n"
                     for t in ["Traceback (most recent call last):\n", "ValueError: a line the runtime ", "split\n"])
    assert _texts(docker)[:2] == ["Traceback (most recent call last):", "ValueError: a line the runtime split"]
    structured = json.dumps({"severity": "ERROR", "message": "RuntimeError: boom", "time": "t"}) + "\n"
    assert _texts(structured)[0] == "RuntimeError: boom"
    # A JSON line that is no log record is left as it is.
    assert _texts('{"loss": 2.5, "step": 10}\n')[0] == '{"loss": 2.5, "step": 10}'
    assert _texts("\ufeffRuntimeError: boom\n")[0] == "RuntimeError: boom"


def test_a_double_spaced_paste_is_read_as_written() -> None:
    assert _texts("RuntimeError: Error(s) in loading state_dict:\n\n\tMissing key(s)\n\n\n\nafter\n") == \
        ["RuntimeError: Error(s) in loading state_dict:", "\tMissing key(s)", "", "after", ""]
    # Two paragraphs are not a double-spaced paste.
    assert _texts("RuntimeError: boom\n\nany idea?\n") == ["RuntimeError: boom", "", "any idea?", ""]


def test_a_flattened_traceback_is_unfolded_after_its_prefixes_and_keeps_its_rank() -> None:
    log = ('[rank3]: Traceback (most recent call last): File "/w/t.py", line 3, in <module> main() '
           "RuntimeError: CUDA error: an illeg\n[rank3]: al memory access was encountered\n")
    lines = split_lines(log)
    assert [(ln.rank, ln.text) for ln in lines][-2] == (3, "RuntimeError: CUDA error: an illegal memory access was "
                                                         "encountered")


def test_a_single_line_wrapped_by_a_terminal_is_joined_but_a_line_as_long_by_chance_is_not() -> None:
    message = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0"
    width = 80
    log = "\n".join(['  File "/w/m.py", line 3, in forward', *[message[i:i + width] for i in range(0, 100, width)],
                     ""])
    assert message in _texts(log)
    # Wrapped on a space: the space stays.
    cut = message.index(" but")
    spaced = "x = 1\n" + message[:cut] + "\n" + message[cut:] + "\n"
    assert message in _texts(spaced)
    # One cut between two letters alone may be a line broken on a space the paste lost: left to the message reader.
    assert _texts("RuntimeError: Expected all tensors, cuda:0 and\ncpu! (when checking)\n")[0].endswith("and")
    # A line that happens to be the longest, followed by pytest's `E` line, is not a wrap.
    natural = ">       raise pickle.UnpicklingError(_get_wo_message(str(e))) from None  #\nE       _pickle.Unpickl\n"
    assert len(_texts(natural)) == 3


def test_launcher_and_collector_prefixes_of_more_tools() -> None:
    lines = split_lines("[pod/trainer-0/trainer] RuntimeError: boom\n[pod/trainer-0/trainer] more\n"
                        "worker-3: x\n")
    assert [(ln.worker, ln.text) for ln in lines][:2] == [("pod/trainer-0/trainer", "RuntimeError: boom"),
                                                          ("pod/trainer-0/trainer", "more")]
    pdsh = split_lines("worker-3: Traceback (most recent call last):\nworker-3: ValueError: x\nworker-1: ok\n")
    assert [(ln.worker, ln.text) for ln in pdsh][:3] == [("worker-3", "Traceback (most recent call last):"),
                                                         ("worker-3", "ValueError: x"), ("worker-1", "ok")]
    assert _texts("2024-03-04T07:21:10+0000 node3 python[2231]: ValueError: x\n")[0] == "ValueError: x"
    assert _texts("2024-03-04T07:21:10.000000001Z stderr F ValueError: x\n")[0] == "ValueError: x"


def test_a_log_pasted_as_a_markdown_quote_is_unquoted_before_its_wrap_is_undone() -> None:
    message = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0"
    quoted = "".join(f"> {t}\n" for t in ['  File "/w/m.py", line 3, in forward', message[:80], message[80:]])
    assert message in _texts(quoted)
    assert _texts("> a\n>\n> b\n>\n>\n>\n> c\n") == ["a", "b", "", "c", ""]


def test_a_log_listed_newest_line_first_is_read_in_the_order_it_was_written() -> None:
    forward = ["[rank1]: step 9", "[rank0]: Traceback (most recent call last):", "[rank1]: step 10",
               '[rank0]:   File "/w/t.py", line 3, in <module>', "[rank0]:     main()", "[rank0]: ValueError: x"]
    assert _texts("\n".join(reversed(forward)) + "\n")[:6] == ["step 9", "Traceback (most recent call last):",
                                                                "step 10", '  File "/w/t.py", line 3, in <module>',
                                                                "    main()", "ValueError: x"]
    # A traceback cut before its frames is no evidence of order.
    assert _texts("ValueError: x\nTraceback (most recent call last):\n")[0] == "ValueError: x"


def test_a_viewers_line_number_gutter_is_removed_but_a_step_table_is_kept() -> None:
    log = "".join(f"{337 + i}{line}\n" for i, line in enumerate(
        ["test_a (__main__.T) ... ok", "test_set (__main__.T) ... FAIL", "", "=" * 20, "FAIL: test_set (__main__.T)"]))
    assert _texts(log)[:5] == ["test_a (__main__.T) ... ok", "test_set (__main__.T) ... FAIL", "", "=" * 20,
                               "FAIL: test_set (__main__.T)"]
    table = "".join(f"{step} loss {0.5 - step / 100:.3f}\n" for step in range(1, 8))
    assert _texts(table)[0] == "1 loss 0.490"


def test_pipes_around_the_level_after_a_stamp_are_a_logger_prefix() -> None:
    lines = split_lines("2024-04-11 09:15:09 | ERROR | stderr | RuntimeError: Error(s) in loading state_dict for M:\n"
                        "2024-04-11 09:15:09 | ERROR | stderr | \tsize mismatch for w: copying a param\n"
                        "2024-05-01 10:00:00.123 | ERROR    | trainer.main:run:42 - CUDA out of memory\n")
    assert [ln.text for ln in lines][:3] == ["RuntimeError: Error(s) in loading state_dict for M:",
                                         "\tsize mismatch for w: copying a param", "CUDA out of memory"]
    assert {ln.level for ln in lines[:3]} == {"ERROR"}
