"""Logs as people paste them into issue threads: excerpts, Markdown, quotes, relayed streams.

The corpus (test_diagnosis_corpus.py) checks real examples; these tests pin each behaviour
on a minimal log, so a regression names its cause.
"""

from __future__ import annotations

import time
from pathlib import Path

from rootcause.tools.observe.diagnosis import diagnose_text

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 3.06 MiB is free.")


def test_a_traceback_pasted_without_its_header_keeps_its_frames(tmp_path: Path) -> None:
    log = ('  File "/work/proj/model.py", line 12, in forward\n'
           '    return x @ self.w\n'
           "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "shape_mismatch" and d.exception_type == "RuntimeError"
    assert d.frames[-1].function == "forward"
    # Another machine's file is the reporter's own code: its call site is the same with or without the root's copy.
    assert d.signature.endswith("shapes cannot be multiplied (<shape> and <shape>)|model:forward")
    (tmp_path / "model.py").write_text("# the project's model\n")
    assert diagnose_text(log, tmp_path).signature == d.signature


def test_an_oom_line_without_traceback_has_the_signature_of_the_traceback(tmp_path: Path) -> None:
    with_tb = diagnose_text(f"Traceback (most recent call last):\n{OOM}\n", tmp_path)
    bare = diagnose_text(f"step 10 loss 2.3\n{OOM.replace('GPU 0', 'GPU 3')}\n", tmp_path)
    assert with_tb.category == bare.category == "cuda_oom"
    assert with_tb.signature == bare.signature


def test_markdown_and_pytest_prefixes_around_an_error_line(tmp_path: Path) -> None:
    bold = diagnose_text("**RuntimeError: CUDA error: device-side assert triggered**\n", tmp_path)
    assert bold.category == "cuda_error" and bold.message == "CUDA error: device-side assert triggered"
    ticks = diagnose_text("`RuntimeError: Expected all tensors to be on the same device, but found at least two "
                          "devices, cpu and cuda:0! (when checking argument for argument mat2 in method wrapper_mm)`\n",
                          tmp_path)
    assert ticks.category == "device_mismatch" and "wrapper_mm" in ticks.signature
    pytest_e = diagnose_text("E       _pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6\n", tmp_path)
    assert pytest_e.category == "checkpoint_mismatch" and pytest_e.exception_type == "_pickle.UnpicklingError"


def test_the_operation_named_after_a_device_error_tells_two_bugs_apart(tmp_path: Path) -> None:
    base = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!")
    index = diagnose_text(f"{base} (when checking argument for argument index in method wrapper__index_select)\n",
                          tmp_path)
    wrapped = diagnose_text(f"{base.replace('cuda:0', 'cuda:1')} (when checking argument for argument \n"
                            "index in method wrapper__index_select)\n", tmp_path)
    target = diagnose_text(f"{base} (when checking argument for argument target in method wrapper_nll_loss)\n",
                           tmp_path)
    assert index.signature == wrapped.signature != target.signature


def test_a_quoted_log_and_a_relayed_stream_are_read_through(tmp_path: Path) -> None:
    quoted = diagnose_text("> Traceback (most recent call last):\n>   File \"/a/b/train.py\", line 3, in <module>\n"
                           ">     import flash_attn\n> ModuleNotFoundError: No module named 'flash_attn'\n", tmp_path)
    assert quoted.category == "import_error" and quoted.exception_type == "ModuleNotFoundError"
    relayed = diagnose_text("[stderr]  File \"/x/y/z.py\", line 1, in <module>\n[stderr]    import tensorboard\n"
                            "[stderr]ModuleNotFoundError: No module named 'tensorboard'\n", tmp_path)
    assert relayed.category == "import_error"
    ray = diagnose_text("(TaskRunner pid=12) Traceback (most recent call last):\n"
                        "(TaskRunner pid=12)   File \"/v/verl/worker.py\", line 71, in wake_up\n"
                        "(TaskRunner pid=12)     ray.get(futures)\n"
                        "(TaskRunner pid=12) ray.exceptions.ActorDiedError: The actor died unexpectedly.\n", tmp_path)
    assert ray.exception_type == "ray.exceptions.ActorDiedError" and ray.frames[-1].function == "wake_up"


def test_a_traceback_cut_off_by_the_paste_is_still_evidence(tmp_path: Path) -> None:
    log = ("[rank3]: Traceback (most recent call last): (RANK 2)\n"
           '[rank3]:   File "/usr/lib/python3.12/dist-packages/torch/distributed/checkpoint/state_dict_loader.py", '
           "line 211, in local_step\n"
           "[rank3]:     local_plan = planner.create_local_plan()\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "IncompleteTraceback" and d.category == "checkpoint_mismatch"
    # A complete error elsewhere in the log wins over the cut-off traceback.
    both = diagnose_text(f"{OOM}\n{log}", tmp_path)
    assert both.category == "cuda_oom"


def test_the_lone_error_after_a_cut_rich_traceback_beats_the_launchers_cut_traceback(tmp_path: Path) -> None:
    log = ("│ ❱  88 │   p_mask = batch[\"attention_mask\"]   │\n"
           "╰──────────────────────────────────────────────╯\n"
           "KeyError: 'attention_mask'\n"
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 7)\n"
           "Traceback (most recent call last):\n"
           '  File "/opt/conda/bin/torchrun", line 33, in <module>\n'
           "    sys.exi\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "KeyError" and d.category == "python_exception"


def test_a_cpp_log_line_loses_to_the_python_exception_that_repeats_it(tmp_path: Path) -> None:
    log = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [336,0,0], "
           "thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
           "Traceback (most recent call last):\n"
           '  File "/w/train.py", line 9, in <module>\n'
           "    loss.item()\n"
           "RuntimeError: CUDA error: device-side assert triggered\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "cuda_error" and d.exception_type == "RuntimeError"
    alone = diagnose_text(log.split("\n", 1)[0], tmp_path)
    assert alone.category == "cuda_error" and "srcIndex < srcSelectDimSize" in alone.signature


def test_lines_without_a_traceback_that_name_the_failure(tmp_path: Path) -> None:
    cases = {
        "        size mismatch for fc.weight: copying a param with shape torch.Size([10, 4]) from checkpoint, "
        "the shape in current model is torch.Size([2, 4]).": "checkpoint_mismatch",
        "[E socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to connect to "
        "(10.0.0.1, 29500).": "distributed_error",
        "ncclInternalError: Internal check failed.": "distributed_error",
        "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE) raised the following async exception: NCCL error: "
        "unhandled system error (run with NCCL_DEBUG=INFO for details)": "distributed_error",
        "Epoch: [5]  loss: 6.59 (6.59)  grad_norm: 0.39 (nan)  time: 0.49": "nonfinite",
        "RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error "
        "(look up to see its traceback):": "import_error",
    }
    for line, category in cases.items():
        assert diagnose_text(f"{line}\n", tmp_path).category == category, line


def test_a_swallowed_signal_line_still_names_the_killed_worker(tmp_path: Path) -> None:
    log = ("  File \"/x/torch/distributed/launcher/api.py\", line 269, in launch_agent\n"
           "    raise ChildFailedError(\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
           "============================================================\n"
           "src/open_r1/grpo.py FAILED\n"
           "------------------------------------------------------------\n"
           "Root Cause (first observed failure):\n"
           "[0]:\n"
           "  rank      : 0 (local_rank: 0)\n"
           "  exitcode  : -9 (pid: 14750)\n"
           "  traceback : Signal 9 (SIGKILL) received by PID 14750\n"
           "============================================================\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "grpo.py").write_text("# the project's entry point\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "host_oom" and d.signature.endswith("|signal SIGKILL||grpo")


def test_pathological_lines_are_read_in_linear_time(tmp_path: Path) -> None:
    # A banner of '*' made an earlier prefix regex backtrack for minutes on a torchrun log.
    lines = ["*" * 4000, ">" * 4000 + "x", " " * 4000 + "x", "E   " + " " * 4000, "`" * 4000, "_" * 4000,
             "a" * 4000, "File " * 800]
    text = "\n".join(lines * 25)
    started = time.monotonic()
    diagnose_text(text, tmp_path)
    assert time.monotonic() - started < 5.0


def test_an_error_reports_labelled_fields_are_the_exception(tmp_path: Path) -> None:
    log = ("## Error Details\n- **Node Type:** TrainLoRA\n- **Exception Type:** RuntimeError\n"
           "- **Exception Message:** Expected all tensors to be on the same device, but found at least two "
           "devices, cpu and cuda:0!\n## Stack Trace\n```\n```\n")
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("device_mismatch", "RuntimeError")
    assert d.signature == diagnose_text("RuntimeError: Expected all tensors to be on the same device, but found at "
                                        "least two devices, cpu and cuda:1!\n", tmp_path).signature


def test_an_error_line_the_rules_know_names_the_category_without_an_exception(tmp_path: Path) -> None:
    d = diagnose_text("step 3 ok\n!!! Exception during processing !!! Expected all tensors to be on the same "
                      "device, but found at least two devices, cpu and cuda:0!\n", tmp_path)
    assert d.category == "device_mismatch"
    assert d.signature.split("|")[1] == "error-line"


def test_a_command_line_in_a_message_is_not_part_of_the_signature(tmp_path: Path) -> None:
    def launch(argv: str) -> str:
        return diagnose_text(f"subprocess.CalledProcessError: Command '[{argv}]' died with <Signals.SIGSEGV: 11>.\n",
                             tmp_path).signature
    assert launch("'/opt/py/bin/python', '-u', 'train.py', '--local_rank=1'") == \
        launch("'/home/u/bin/python3', '-u', 'tools/train.py', '--local_rank=3', '--cfg', 'a.yaml'")


def test_old_and_new_wordings_of_a_store_connect_timeout_are_one_failure(tmp_path: Path) -> None:
    old = diagnose_text("RuntimeError: connect() timed out. Original timeout was 60000 ms.\n", tmp_path)
    new = diagnose_text("torch.distributed.DistNetworkError: The client socket has timed out after 300000ms while "
                        "trying to connect to (node7, 29500).\n", tmp_path)
    bind = diagnose_text("torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                         "network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE\n", tmp_path)
    assert old.signature == new.signature != bind.signature
    assert {old.category, new.category, bind.category} == {"distributed_error"}


def test_an_async_nccl_error_in_the_watchdog_is_not_a_timeout(tmp_path: Path) -> None:
    d = diagnose_text("[rank1]:[E325 17:42:08.2 ProcessGroupNCCL.cpp:1911] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
                      "Process group watchdog thread terminated with exception: Collective WorkNCCL(SeqNum=2, "
                      "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) raised the following async "
                      "exception: NCCL error: unhandled system error\n", tmp_path)
    assert d.category == "distributed_error"


def test_an_infinite_relative_difference_in_a_closeness_report_is_not_a_nonfinite_value(tmp_path: Path) -> None:
    log = ("____ TestOps.test_dropout ____\ntest/test_ops.py:24: in test_dropout\n    self.assertEqual(y, x)\n"
           "E       AssertionError: Tensor-likes are not close!\nE       Mismatched elements: 2 / 6 (33.3%)\n"
           "E       Greatest absolute difference: 1.77 at index (0, 0) (up to 1e-05 allowed)\n"
           "E       Greatest relative difference: inf at index (0, 0) (up to 1.3e-06 allowed)\n"
           "FAILED test_ops.py::TestOps::test_dropout - AssertionError: Tensor-likes are not close!\n"
           "==== 1 failed, 4 passed in 1.10s ====\n")
    assert diagnose_text(log, tmp_path).category == "test_failure"


def test_a_list_of_potential_causes_is_not_evidence_of_any(tmp_path: Path) -> None:
    log = ("[rank0]:[E1225 12:58:31.9 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 "
           "milliseconds before timing out.\n(raylet) A worker died or was killed while executing a task by an "
           "unexpected system error. There are some potential root causes. (1) The process is killed by SIGKILL by "
           "OOM killer due to high memory usage. (2) The worker is crashed unexpectedly due to SIGSEGV or other "
           "unexpected errors.\n")
    assert diagnose_text(log, tmp_path).category == "hang"


def test_rays_out_of_memory_error_is_the_hosts_memory(tmp_path: Path) -> None:
    d = diagnose_text("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                      "Memory on the node (IP: 10.0.0.5) where the task was running was 250.04GB / 251.54GB\n",
                      tmp_path)
    assert d.category == "host_oom"


def test_a_wrapper_pointing_at_the_root_cause_elsewhere_defers_to_it(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n  File \"/v/pynccl_wrapper.py\", line 256, in NCCL_CHECK\n"
           "    raise RuntimeError(f\"NCCL error: {error_str}\")\nRuntimeError: NCCL error: unhandled system error\n"
           "Traceback (most recent call last):\n  File \"/v/api_server.py\", line 166, in build_client\n"
           "    raise RuntimeError(\n"
           "RuntimeError: Engine process failed to start. See stack trace for the root cause.\n")
    assert diagnose_text(log, tmp_path).category == "distributed_error"


def test_a_weight_loader_refusing_a_checkpoint_is_a_checkpoint_mismatch_whatever_the_model(tmp_path: Path) -> None:
    def load(model: str) -> object:
        return diagnose_text(
            "Traceback (most recent call last):\n"
            '  File "/venv/vllm/model_executor/models/x.py", line 648, in load_weights\n'
            "    return loader.load_weights(\n"
            f"ValueError: There is no module or parameter named 'language_model' in {model}\n", tmp_path)
    llama, gemma = load("LlamaForCausalLM"), load("Gemma3ForCausalLM")
    assert llama.category == gemma.category == "checkpoint_mismatch"
    assert llama.signature == gemma.signature


def test_how_a_model_was_wrapped_is_not_part_of_a_parameters_name(tmp_path: Path) -> None:
    def mismatch(name: str) -> str:
        return diagnose_text("RuntimeError: Error(s) in loading state_dict for PeftModelForCausalLM:\n"
                             f"\tsize mismatch for {name}: copying a param with shape torch.Size([32005, 4096]) from "
                             "checkpoint, the shape in current model is torch.Size([32000, 4096]).\n",
                             tmp_path).signature
    assert mismatch("base_model.model.model.embed_tokens.base_layer.weight") == mismatch("model.embed_tokens.weight")
    assert mismatch("model.embed_tokens.weight") != mismatch("model.layers.0.self_attn.q_proj.lora_A.weight")


def test_two_segfaults_in_two_functions_are_two_failures(tmp_path: Path) -> None:
    def crash(function: str) -> str:
        return diagnose_text("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f2f (most recent call "
                             f'first):\n  File "/venv/torch/distributed/x.py", line 12 in {function}\n'
                             '  File "/w/train.py", line 3 in main\n', tmp_path).signature
    assert crash("all_reduce") != crash("ncclCommInitRank")
    assert crash("all_reduce") == crash("all_reduce")


def test_a_logger_line_finding_nan_in_the_grad_norm_beats_the_launchers_report(tmp_path: Path) -> None:
    log = ("ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 (message='found "
           "NaN in local grad norm for bucket #0 in backward pass')\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "pretrain_gpt.py FAILED\n  exitcode  : 16 (pid: 880)\n")
    assert diagnose_text(log, tmp_path).category == "nonfinite"


def test_a_vllm_broadcast_stall_is_a_hang(tmp_path: Path) -> None:
    line = ("(EngineCore pid=2025) INFO 08-13 11:27:02 [shm_broadcast.py:802] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging.\n")
    assert diagnose_text(line * 3, tmp_path).category == "hang"


def test_a_loggers_error_line_naming_the_failure_beats_a_bare_launcher_wrapper(tmp_path: Path) -> None:
    log = ("2024-03-04 07:21:09,001 - trainer - INFO - step 10\n"
           "2024-03-04 07:21:10,123 - trainer - ERROR - batch 11: Expected all tensors to be on the same device, but "
           "found at least two devices, cuda:0 and cpu\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "train.py FAILED\n  exitcode  : 1 (pid: 880)\n")
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("device_mismatch", "LoggedError")


def test_a_debuggers_exception_report_is_the_exception(tmp_path: Path) -> None:
    log = ("Exception has occurred: RuntimeError\n"
           "The size of tensor a (1024) must match the size of tensor b (512) at non-singleton dimension 3\n"
           '  File "C:\\src\\model.py", line 331, in _attn\n    w = w * b\n')
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("shape_mismatch", "RuntimeError")


def test_a_shells_killed_after_a_hang_is_the_supervisors_kill_not_the_failure(tmp_path: Path) -> None:
    hang = ("[rank4]:[E226 11:06:39.1 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, NumelIn=5, NumelOut=5, Timeout(ms)=600000) ran for "
            "600043 milliseconds before timing out.\n")
    assert diagnose_text(hang + "Received sigquit from a child process.\nKilled\n", tmp_path).category == "hang"
    assert diagnose_text("epoch 3 step 10\nKilled\n", tmp_path).category == "host_oom"


def test_rays_memory_monitor_names_a_host_oom_in_either_wording(tmp_path: Path) -> None:
    raylet = diagnose_text("(raylet) [2025-04-16 09:03:07,551 E 802 802] (raylet) node_manager.cc:3219: 2 Workers "
                           "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed\n", tmp_path)
    raised = diagnose_text("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                           "memory.\n", tmp_path)
    assert raylet.category == raised.category == "host_oom"
    assert raylet.signature == raised.signature


def test_training_logs_with_a_blown_up_grad_norm(tmp_path: Path) -> None:
    def log(norms: list[float]) -> str:
        return "".join(f"Iter [{100 * i}/9000]\tlr: 1.8e-04, loss: {20 + i:.4f}, grad_norm: {n:.4f}\n"
                       for i, n in enumerate(norms))
    assert diagnose_text(log([31.4, 44.1, 78.9, 121.6, 176.2, 231.9, 289.5]), tmp_path).category == \
        "gradient_explosion"  # a steady 9x rise
    assert diagnose_text(log([3.5e12, 4.2e10, 9.1e8, 2.0e8]), tmp_path).category == "gradient_explosion"
    assert diagnose_text(log([0.5, 0.9, 1.3, 1.8, 2.6, 2.9]), tmp_path).category == "python_exception"  # warm-up


def test_backticks_around_each_pasted_line_are_not_the_message(tmp_path: Path) -> None:
    plain = ("RuntimeError: Error(s) in loading state_dict for Darknet:\n\tsize mismatch for module_list.81.conv_81"
             ".weight: copying a param with shape torch.Size([21, 1024, 1, 1]) from checkpoint, the shape in current "
             "model is torch.Size([255, 1024, 1, 1]).\n")
    marked = "".join(f"\t`{line.strip()}`\n" for line in plain.splitlines())
    assert diagnose_text(marked, tmp_path).signature == diagnose_text(plain, tmp_path).signature


def test_unittests_fail_report_makes_its_assertion_a_test_failure(tmp_path: Path) -> None:
    log = ("test_set (__main__.TestOps) ... FAIL\n======\nFAIL: test_set (__main__.TestOps)\n------\n"
           "Traceback (most recent call last):\n  File \"/t/test_ops.py\", line 3, in test_set\n"
           "    self.check(a, 6)\n  File \"/t/utils.py\", line 9, in check\n    assert a <= 1e-05\n"
           "AssertionError: 1 not less than or equal to 1e-05\n")
    assert diagnose_text(log, tmp_path).category == "test_failure"
    assert diagnose_text("FAIL: test_set (__main__.TestOps)\n", tmp_path).category == "test_failure"


def test_a_traceback_with_blank_lines_between_frames_keeps_its_frames(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n\n  File \"E:\\w\\train.py\", line 367, in <module>\n    main()\n\n"
           "  File \"E:\\w\\model.py\", line 99, in forward\n    mu = self.mu(h)\n\n"
           "RuntimeError: mat1 and mat2 shapes cannot be multiplied (61x230400 and 256x100)\n")
    d = diagnose_text(log, tmp_path)
    assert [f.function for f in d.frames] == ["<module>", "forward"] and d.category == "shape_mismatch"


def test_an_error_raised_while_ranks_meet_is_a_rendezvous_failure(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "C:\\venv\\lib\\site-packages\\torch\\distributed\\elastic\\rendezvous\\static_tcp_rendezvous.py",'
           " line 67, in next_rendezvous\n    self._store = TCPStore(\n"
           "RuntimeError: use_libuv was requested but PyTorch was build without a transport\n")
    assert diagnose_text(log, tmp_path).category == "distributed_error"


def test_a_windows_access_violation_exit_status_is_a_crash(tmp_path: Path) -> None:
    log = ("subprocess.CalledProcessError: Command '['C:\\\\py\\\\python.exe', 'train.py', '--cfg', 'a.toml']' "
           "returned non-zero exit status 3221225477.\n18:52:24-907213 INFO     Training has ended.\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "crash" and "Training has ended" not in d.signature


def test_nan_found_in_any_named_tensor_is_non_finite(tmp_path: Path) -> None:
    log = "NaN found in latents, replacing with zeros\nsteps: 2/2400 [00:03, avr_loss=0.1072]\n" * 3
    assert diagnose_text(log, tmp_path).category == "nonfinite"


def test_a_native_extensions_missing_symbol_is_named_by_the_extension(tmp_path: Path) -> None:
    def missing(where: str, symbol: str) -> str:
        return diagnose_text(f"ImportError: {where}/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined "
                             f"symbol: {symbol}\n", tmp_path).signature
    a = missing("/home/a/env/lib/python3.11/site-packages", "_ZN2at4_ops5zeros4callEN3c108ArrayRef")
    b = missing("/srv/neox/.venv/lib/python3.8/site-packages", "_ZN3c104cuda20CUDACachingAllocator9allocatorE")
    assert a == b and "flash_attn_2_cuda" in a
    assert a != diagnose_text("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or "
                              "directory\n", tmp_path).signature


def test_a_windows_path_with_spaces_is_one_path(tmp_path: Path) -> None:
    def nan(path: str) -> str:
        return diagnose_text(f"RuntimeError: NaN detected in latents: {path}\n", tmp_path).signature
    assert nan("D:\\lora data\\img\\120_k\\press-event-2021-photo-0047.jpg") == nan("H:\\train\\10_a woman\\IMG_1.jpg")


def test_a_stall_of_the_first_collective_is_not_a_stall_after_training_ran(tmp_path: Path) -> None:
    def stall(seq: int) -> str:
        return diagnose_text(f"[rank1]:[E502 14:11:47.3 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
                             f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
                             "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n", tmp_path).signature
    assert stall(1) != stall(4084) and stall(4084) == stall(17)


def test_a_cuda_error_the_nccl_watchdog_logged_is_the_cause_of_its_terminate(tmp_path: Path) -> None:
    log = ("[rank3]:[E416 13:29:57.3 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 3] Process group watchdog "
           "thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
           "frame #5: c10d::ProcessGroupNCCL::watchdogHandler() + 0x69a (0x7f2b in libtorch_cuda.so)\n\n"
           "terminate called after throwing an instance of 'c10::DistBackendError'\n")
    assert diagnose_text(log, tmp_path).category == "cuda_error"


def test_a_pasted_message_alone_is_categorised_by_its_words(tmp_path: Path) -> None:
    line = ("  Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1! "
            "(when checking argument for argument index in method wrapper_CUDA_scatter__value)\n")
    assert diagnose_text(line, tmp_path).category == "device_mismatch"
    counters = "".join(f"iteration {i} | lm_loss: 2.2 | number of nan iterations: 0 |\n" for i in range(6))
    assert diagnose_text(counters, tmp_path).category == "python_exception"


def test_a_trainers_spike_detector_names_a_gradient_explosion(tmp_path: Path) -> None:
    log = "".join(f"WARNING - Step {1562 + i}: detected nan/inf/spiky gradient (norm=2.31)\n" for i in range(3))
    assert diagnose_text(log, tmp_path).category == "gradient_explosion"


def test_keys_that_differ_only_by_a_wrappers_prefix_name_that_wrapper(tmp_path: Path) -> None:
    def load(missing: list[str], unexpected: list[str], model: str = "Net") -> str:
        quoted = ", ".join(f'"{k}"' for k in missing), ", ".join(f'"{k}"' for k in unexpected)
        return diagnose_text(f"RuntimeError: Error(s) in loading state_dict for {model}:\n\tMissing key(s) in "
                             f"state_dict: {quoted[0]}.\n\tUnexpected key(s) in state_dict: {quoted[1]}.\n",
                             tmp_path).signature
    keys = ["conv1.weight", "conv1.bias", "fc.weight"]
    saved_wrapped = load(keys, [f"module.{k}" for k in keys])
    loaded_wrapped = load([f"module.data_bn.{k}" for k in keys], [f"data_bn.{k}" for k in keys], "DataParallel")
    assert saved_wrapped == loaded_wrapped and "wrapper-prefix module" in saved_wrapped
    assert load(keys, [f"_orig_mod.{k}" for k in keys]) != saved_wrapped
    assert "wrapper-prefix" not in load(keys, ["head.weight", "head.bias"])
