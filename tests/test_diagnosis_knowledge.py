"""Knowledge of error families and root unwrapping, each pinned on a minimal log in its real shape."""

from __future__ import annotations

from pathlib import Path

from rootcause.tools.observe.diagnosis import diagnose_text

NCCL_TIMEOUT = (
    "[rank1]:[E304 07:21:10.120 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600032 milliseconds "
    "before timing out.\n")


def test_glibc_heap_corruption_and_killed_by_signal_are_crashes(tmp_path: Path) -> None:
    glibc = diagnose_text("step 3 loss 2.1\ndouble free or corruption (!prev)\nAborted (core dumped)\n", tmp_path)
    assert glibc.category == "crash" and "glibc-heap-corruption" in glibc.signature
    assert glibc.message == "double free or corruption (!prev)"
    killed = diagnose_text("Running 2 items in this shard\nFatal: worker gw1 crashed: killed by signal: Aborted\n",
                           tmp_path)
    assert killed.category == "crash"


def test_dtype_device_and_cuda_knowledge(tmp_path: Path) -> None:
    fsdp = diagnose_text("Traceback (most recent call last):\n  File \"/w/train.py\", line 40, in <module>\n"
                         "    model = FSDP(model)\nValueError: Must flatten tensors with uniform dtype but got "
                         "torch.bfloat16 and torch.float32\n", tmp_path)
    assert fsdp.category == "dtype_mismatch" and "torch.bfloat16 and torch.float32" in fsdp.signature
    device = diagnose_text("ValueError: Inconsistent compute device and `device_id` on rank 1: cuda:0 vs cuda:1\n",
                           tmp_path)
    assert device.category == "device_mismatch"
    nccl_cuda = diagnose_text(
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\nCuda failure 'an illegal memory access was encountered'\n", tmp_path)
    assert nccl_cuda.category == "cuda_error"


def test_a_nan_warning_wins_over_a_harmless_error_at_exit(tmp_path: Path) -> None:
    log = ("step 118 | loss 2.31\n"
           "WARNING:trainer:nan loss detected at step 119, skipping batch\n"
           "step 120 | loss nan\n"
           "Exception ignored in: <function tqdm.__del__ at 0x7f3a2b1c>\n"
           "Traceback (most recent call last):\n"
           '  File "/opt/env/lib/python3.11/site-packages/tqdm/std.py", line 1148, in __del__\n'
           "    self.close()\n"
           "AttributeError: 'tqdm' object has no attribute 'disp'\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "nonfinite" and "nonfinite loss" in d.signature


def test_a_watchdog_timeout_then_sigabrt_is_a_hang(tmp_path: Path) -> None:
    log = (NCCL_TIMEOUT + "[rank1]:Fatal Python error: Aborted\n[rank1]:\n"
           "[rank1]:Thread 0x00007f3a (most recent call first):\n"
           '[rank1]:  File "/w/train.py", line 88 in train_step\n'
           "E0304 07:21:40.001 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -6) "
           "local_rank: 1 (pid: 4412) of binary: /usr/bin/python\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and "nccl-watchdog-timeout ALLREDUCE" in d.signature


def test_a_steady_grad_norm_rise_is_an_explosion(tmp_path: Path) -> None:
    values = [(2.41, 0.9), (2.44, 1.3), (2.52, 2.9), (3.90, 6.1), (6.75, 12.6)]
    log = "".join(f"{{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': 0.0003, 'epoch': 0.{i}}}\n"
                  for i, (loss, norm) in enumerate(values))
    d = diagnose_text(log, tmp_path)
    assert d.category == "gradient_explosion" and "grad-norm-explosion" in d.signature
    assert "rose 14.0x over 4 logged steps" in d.message


def test_a_rank_whose_traceback_and_failure_are_both_logged_is_failed(tmp_path: Path) -> None:
    log = ("[rank0]:[W304 07:21:10.000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0] using GPU 0\n"
           "Traceback (most recent call last):\n"
           '  File "/w/train.py", line 12, in <module>\n'
           "    cfg = load()\n"
           "FileNotFoundError: [Errno 2] No such file or directory: 'conf.yaml'\n"
           "E0304 07:21:12.000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
           "local_rank: 0 (pid: 4411) of binary: /usr/bin/python3\n")
    d = diagnose_text(log, tmp_path)
    assert d.ranks["0"].outcome == "fail" and "FileNotFoundError" in (d.ranks["0"].first_error or "")


def test_transformers_lazy_import_wrapper_hands_the_root_to_its_cause(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/home/u/sft.py", line 3, in <module>\n'
           "    from transformers import Trainer\n"
           '  File "/env/lib/python3.10/site-packages/transformers/utils/import_utils.py", line 1766, in __getattr__\n'
           "    module = self._get_module(self._class_to_module[name])\n"
           "RuntimeError: Failed to import transformers.trainer because of the following error (look up to see its "
           "traceback):\ncannot import name 'split_torch_state_dict_into_shards' from 'huggingface_hub' "
           "(/env/lib/python3.10/site-packages/huggingface_hub/__init__.py)\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "import_error"
    assert "cannot import name 'split_torch_state_dict_into_shards'" in d.signature


def test_a_multiprocess_test_wrapper_hands_the_root_to_the_assertion(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/env/lib/python3.11/site-packages/torch/testing/_internal/common_distributed.py", line 690, '
           "in _check_return_codes\n"
           "    raise RuntimeError(error)\n"
           "RuntimeError: Process 3 exited with error code 10 and exception:\n"
           "Traceback (most recent call last):\n"
           '  File "/w/tests/test_fsdp_grad.py", line 58, in test_grad_sync\n'
           "    self.assertEqual(grad_norm, ref_norm)\n"
           "AssertionError: Tensor-likes are not close!\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "AssertionError" and d.category == "test_failure"


def test_vllm_worker_error_lines_before_the_engine_wrapper_are_the_root(tmp_path: Path) -> None:
    w = "(VllmWorker rank=0 pid=2573) ERROR 03-25 10:38:06 [multiproc_executor.py:435] "
    c = "ERROR 03-25 10:38:09 [core.py:343] "
    log = (f"INFO 03-25 10:38:01 [config.py:585] This model supports multiple tasks\n"
           f"{w}WorkerProc failed to start.\n{w}Traceback (most recent call last):\n"
           f'{w}  File "/usr/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 481, '
           "in load_weights\n"
           f"{w}    param = params_dict[name]\n{w}            ~~~~~~~~~~~^^^^^^\n"
           f"{w}KeyError: 'layers.0.mlp.experts.w2_weight'\n"
           f"{c}EngineCore failed to start.\n{c}Traceback (most recent call last):\n"
           f'{c}  File "/usr/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 330, in run_engine_core\n'
           f"{c}    raise e\n{c}RuntimeError: Engine core initialization failed. See root cause above.\n"
           "Traceback (most recent call last):\n"
           '  File "/home/u/serve.py", line 9, in <module>\n'
           "    llm = LLM(model=path)\n"
           "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "KeyError" and d.message == "'layers.0.mlp.experts.w2_weight'"
    assert d.ranks["0"].outcome == "fail"


def test_ray_actor_error_around_a_type_error(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/home/u/main_ppo.py", line 31, in main\n'
           "    ray.get(runner.run.remote(config))\n"
           "ray.exceptions.RayActorError: The actor died because of an error raised in its creation task, "
           "ray::WorkerDict.__init__() (pid=90211, ip=10.0.0.3, actor_id=4f1a, repr=<WorkerDict object>)\n"
           '  File "/env/lib/python3.10/site-packages/verl/workers/fsdp_workers.py", line 94, in __init__\n'
           "    self.model = build(**config)\n"
           "TypeError: build() got an unexpected keyword argument 'use_remove_padding'\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "TypeError" and "use_remove_padding" in d.message


def test_slurm_lines(tmp_path: Path) -> None:
    oom = diagnose_text("0: step 12 loss 2.2\n0: slurmstepd-n1: error: Detected 1 oom-kill event(s) in "
                        "StepId=4121.0. Some of your processes may have been killed by the cgroup out-of-memory "
                        "handler.\nsrun: error: n1: task 0: Out Of Memory\n", tmp_path)
    assert oom.category == "host_oom" and oom.ranks["0"].node == "n1"
    plain = diagnose_text("slurmstepd: error: Detected 2 oom-kill event(s) in StepId=88.batch. Some of your "
                          "processes may have been killed by the cgroup out-of-memory handler.\n", tmp_path)
    assert plain.category == "host_oom"
    for line in ("slurmstepd: error: *** JOB 4122 ON n1 CANCELLED AT 2026-03-04T07:21:10 DUE TO TIME LIMIT ***",
                 "0: slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-03-04T07:21:10 DUE TO TIME LIMIT ***"):
        d = diagnose_text(f"0: step 1\n1: step 1\n{line}\n", tmp_path)
        assert d.category == "hang" and "slurm-time-limit" in d.signature, line
        assert "TIME LIMIT" in d.message
    failed = diagnose_text("0: step 1\n1: Traceback (most recent call last):\n"
                           '1:   File "/w/train.py", line 5, in <module>\n1:     boom()\n'
                           "1: ValueError: rank 1 refuses\n"
                           "srun: error: n2: task 1: Exited with exit code 1\n", tmp_path)
    assert failed.category == "python_exception" and failed.exception_type == "ValueError"
    assert failed.ranks["1"].outcome == "fail" and failed.ranks["1"].node == "n2"
    assert failed.ranks["0"].outcome == "ok"
    bare = diagnose_text("srun: error: n2: task 1: Exited with exit code 1\nsrun: Terminating StepId=7.0\n", tmp_path)
    assert bare.ranks["1"].outcome == "fail" and bare.ranks["1"].node == "n2" and bare.message


def test_hang_location_is_the_projects_line_of_the_first_stuck_rank(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("# the project's script\n")
    dump = ("[rank{r}]:Thread 0x00007f3a2b1c (most recent call first):\n"
            '[rank{r}]:  File "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501 '
            "in all_reduce\n"
            '[rank{r}]:  File "{root}/train.py", line {line} in sync_grads\n'
            '[rank{r}]:  File "{root}/train.py", line 90 in <module>\n')
    log = "".join(dump.format(r=r, root=tmp_path, line=line) for r, line in ((1, 42), (0, 40)))
    d = diagnose_text(log, tmp_path, timed_out="idle")
    assert d.category == "hang" and d.location == "train.py:40"
    assert d.ranks["0"].first_error == "waiting in all_reduce at train.py:40"
    assert d.ranks["1"].first_error == "waiting in all_reduce at train.py:42"
    assert d.stacks[0].describe().startswith("rank 0: waits in all_reduce at train.py:40 (innermost: ")
    assert d.message.startswith("no progress")


def test_a_crash_dump_names_the_projects_line_and_no_message_is_empty(tmp_path: Path) -> None:
    (tmp_path / "ext.py").write_text("# calls the C extension\n")
    log = ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent call first):\n"
           '  File "/env/lib/python3.11/site-packages/fastops/core.py", line 12 in gather\n'
           f'  File "{tmp_path}/ext.py", line 7 in run\n')
    d = diagnose_text(log, tmp_path, signal=11)
    assert d.category == "crash" and d.location == "ext.py:7"
    quiet = diagnose_text("loading data\nERROR: could not open shard 3 of 8\nexiting\n", tmp_path, exit_code=2)
    assert quiet.message == "could not open shard 3 of 8"
    silent = diagnose_text("loading data\n", tmp_path, exit_code=3)
    assert silent.message == "exit code 3"


def test_a_store_timeout_inside_a_collective_is_a_hang(tmp_path: Path) -> None:
    frames = ('Traceback (most recent call last):\n  File "/w/sync.py", line 40, in {fn}\n    store.get(key)\n'
              "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /sync/0/12\n")
    assert diagnose_text(frames.format(fn="barrier"), tmp_path).category == "hang"
    assert diagnose_text(frames.format(fn="load_config"), tmp_path).category == "distributed_error"


def test_one_message_however_it_was_pasted_or_wrapped(tmp_path: Path) -> None:
    tb = 'Traceback (most recent call last):\n  File "/w/t.py", line 3, in <module>\n    run()\n'
    plain = diagnose_text(tb + "ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16\n", tmp_path)
    ticked = diagnose_text(tb + "ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16`\n",
                           tmp_path)
    assert plain.signature == ticked.signature
    one = diagnose_text(tb + "TypeError: LlamaModel.forward() got an unexpected keyword argument 'labels_mask'\n",
                        tmp_path)
    two = diagnose_text(tb + "TypeError: MistralForCausalLM.forward() got an unexpected keyword argument "
                        "'labels_mask'\"\n", tmp_path)
    other = diagnose_text(tb + "TypeError: LlamaModel.forward() got an unexpected keyword argument 'position'\n",
                          tmp_path)
    assert one.signature == two.signature != other.signature
    old = diagnose_text(tb + "RuntimeError: NCCL error in: /src/ProcessGroupNCCL.cpp:1287, invalid usage, NCCL "
                        "version 2.14.3\n", tmp_path)
    new = diagnose_text(tb + "torch.distributed.DistBackendError: NCCL error in: /opt/pt/ProcessGroupNCCL.cpp:1970, "
                        "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\n", tmp_path)
    assert old.signature == new.signature and "nccl-error invalid usage" in old.signature


def test_a_flattened_traceback_broken_by_the_paste_reads_as_the_original(tmp_path: Path) -> None:
    lines = ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in step', "    loss.backward()",
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "CUDA kernel errors might be asynchronously reported at some other API call.",
             "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
    original = diagnose_text("\n".join(lines) + "\n", tmp_path)
    flat = " ".join(ln.strip() for ln in lines)
    cut = flat.index("illegal") + 4
    pasted = diagnose_text(f"[rank3]: {flat[:cut]}\n{flat[cut:]}\n", tmp_path)
    assert pasted.category == original.category == "cuda_error"
    assert pasted.signature == original.signature


def test_a_bare_grad_column_is_the_grad_norm(tmp_path: Path) -> None:
    rows = [(1, 0.41, 0.07), (2, 0.40, 0.07), (3, 0.41, 0.08), (4, 0.45, 0.25), (5, 0.61, 1.9), (6, 0.9, 7.4)]
    log = "".join(f"Train | Epoch 3 | {i}/40 | Loss {loss} | Grad {grad}\n" for i, loss, grad in rows)
    d = diagnose_text(log, tmp_path)
    assert d.category == "gradient_explosion" and d.exception_type == "GradientExplosion"


def test_rule_and_template_tables_are_well_formed_data() -> None:
    from rootcause.tools.observe.diagnosis.rules import RULES
    from rootcause.tools.observe.diagnosis.templates import TEMPLATES
    from rootcause.tools.vocabulary.categories import CATEGORIES

    assert {rule.category for rule in RULES} <= set(CATEGORIES)
    assert all(rule.type or rule.message or rule.function for rule in RULES)
    assert {t.category for t in TEMPLATES} - {None} <= set(CATEGORIES)
    assert len({t.name for t in TEMPLATES}) == len(TEMPLATES)
    watchdog = next(t for t in TEMPLATES if t.name == "NCCLWatchdogTimeout")
    m = watchdog.pattern.search("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=allGather")
    assert m and watchdog.identity(m) == "nccl-watchdog-timeout ALLGATHER"


def test_a_logger_line_wrapped_mid_sentence_keeps_its_signature(tmp_path: Path) -> None:
    message = ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
               "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)")
    one = diagnose_text(f"2024-05-01 10:00:00 ERROR Exception: {message}\n", tmp_path)
    cut = message.index(" cpu!")
    two = diagnose_text(f"2024-05-01 10:00:00 ERROR Exception: {message[:cut]}\n{message[cut + 1:]}\n"
                        "2024-05-01 10:00:01 INFO shutting down\n", tmp_path)
    assert one.category == two.category == "device_mismatch"
    assert one.signature == two.signature and "wrapper_CUDA_addmm" in one.signature


def test_a_lone_exception_line_keeps_its_type_beside_a_template(tmp_path: Path) -> None:
    worker = diagnose_text("RuntimeError: DataLoader worker (pid 4121) is killed by signal: Segmentation fault.\n",
                           tmp_path)
    assert worker.category == "crash" and worker.exception_type == "RuntimeError"
    dynamo = diagnose_text("torch._dynamo.exc.Unsupported: call_function BuiltinVariable(setattr)\n", tmp_path)
    assert dynamo.exception_type == "torch._dynamo.exc.Unsupported"
    quiet = diagnose_text("trainer.Trainer: epoch 1 done\nstep 5 loss nan\n", tmp_path)
    assert quiet.category == "nonfinite"  # a logger name is not an exception


def test_a_wrapper_pointing_above_loses_to_the_error_logged_before_it(tmp_path: Path) -> None:
    log = ("(VllmWorkerProcess pid=812) ERROR 11-02 09:14:02 multiproc_worker_utils.py:233] Exception in worker "
           "VllmWorkerProcess while processing method load_model.\n"
           "(VllmWorkerProcess pid=812) ERROR 11-02 09:14:02 multiproc_worker_utils.py:233] Traceback (most recent "
           "call last):\n"
           '(VllmWorkerProcess pid=812) ERROR 11-02 09:14:02 multiproc_worker_utils.py:233]   File "/env/vllm/'
           'worker.py", line 183, in load_model\n'
           "(VllmWorkerProcess pid=812) ERROR 11-02 09:14:02 multiproc_worker_utils.py:233]     self.model = "
           "get_model()\n"
           "(VllmWorkerProcess pid=812) ERROR 11-02 09:14:02 multiproc_worker_utils.py:233] ValueError: quantization "
           "method 'fp4' is not supported\n"
           "Traceback (most recent call last):\n"
           '  File "/home/u/serve.py", line 4, in <module>\n'
           "    llm = LLM(model=path, tensor_parallel_size=2)\n"
           "RuntimeError: Worker failed with error 'quantization method', please check the stack trace above for the "
           "root cause\n")
    d = diagnose_text(log, tmp_path)
    assert d.exception_type == "ValueError" and "fp4" in d.message


def test_batch_two_rules_on_minimal_logs(tmp_path: Path) -> None:
    # PyTorch's message naming its rank is not a rank tag: the monitored barrier's timeout stays a hang.
    barrier = diagnose_text('Traceback (most recent call last):\n  File "run.py", line 9, in main\n'
                            "    dist.monitored_barrier()\n"
                            "RuntimeError: [Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 60000 ms\n",
                            tmp_path)
    assert barrier.category == "hang" and barrier.exception_type == "RuntimeError"
    # NCCL's warning names the CUDA failure behind a later "unhandled cuda error".
    nccl = diagnose_text("host:11:12 [1] enqueue.cc:90 NCCL WARN Cuda failure 'out of memory'\n"
                         "RuntimeError: NCCL Error 1: unhandled cuda error\n", tmp_path)
    assert nccl.category == "cuda_oom" and nccl.signature == "v3|nccl-cuda-failure out-of-memory||"
    # Old PyTorch's device message.
    old = diagnose_text("RuntimeError: Expected object of device type cuda but got device type cpu for argument "
                        "#1 'self' in call to _th_mm\n", tmp_path)
    assert old.category == "device_mismatch"
    # A bracketed metric name: `[Loss] nan`; the series stands in for a call site.
    bracket = diagnose_text("E1 | [Loss] 3.20 | [step] 10\nE2 | [Loss] nan | [step] 20\n", tmp_path)
    assert bracket.category == "nonfinite" and bracket.signature == "v3|nonfinite loss||loss"


def test_causes_behind_wrappers_and_quoted_source_lines(tmp_path: Path) -> None:
    # vLLM quotes the worker's error inside its wrapper; the cause's words identify it.
    quoted = diagnose_text("RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was "
                           "encountered\nCompile with `TORCH_USE_CUDA_DSA`.\n', please check the stack trace "
                           "above for the root cause\n", tmp_path)
    plain = diagnose_text("RuntimeError: CUDA error: an illegal memory access was encountered\n", tmp_path)
    assert quoted.category == "cuda_error" and quoted.signature == plain.signature
    # Ranks' last lines after torchrun's report are the error, not the ChildFailedError.
    after = diagnose_text(
        "Traceback (most recent call last):\n  File \"/env/bin/torchrun\", line 8, in <module>\n    main()\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n===\ntrain.py FAILED\n===\n"
        "[rank1]: ValueError: Expected all tensors to be on the same device, but found at least two devices, "
        "cpu and cuda:1!\n", tmp_path)
    assert after.category == "device_mismatch" and after.exception_type == "ValueError"
    # A traceback's source line quoting a message template is code, not the error.
    source = diagnose_text(
        "-> [2152] raise RuntimeError('Error(s) in loading state_dict for {}:\\n\\t{}'.format(\n\n"
        "RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.weight\"\n",
        tmp_path)
    assert source.exception_type == "RuntimeError" and "Missing key(s)" in source.signature
    # A Markdown fence glued to the message is not part of it.
    fenced = diagnose_text("RuntimeError: Tensor for 'out' is on CPU, but expected them to be on GPU```\n", tmp_path)
    assert fenced.signature.endswith("expected them to be on GPU|")


def test_a_shell_reporting_its_child_killed_is_a_crash(tmp_path: Path) -> None:
    for line, identity in [("zsh: segmentation fault (core dumped)  python train.py", "signal SIGSEGV"),
                           ("bash: line 1: 4412 Segmentation fault      (core dumped) python train.py",
                            "signal SIGSEGV"),
                           ("zsh: abort (core dumped)  python train.py", "signal SIGABRT"),
                           ("zsh: bus error  python train.py", "signal SIGBUS")]:
        d = diagnose_text(f"step 3 loss 2.1\n{line}\n", tmp_path)
        assert (d.category, d.signature) == ("crash", f"v3|{identity}||"), line


def test_a_log_without_an_error_has_one_stable_signature(tmp_path: Path) -> None:
    first = diagnose_text("step 1 loss 2.30\nstep 2 loss 2.10\n", tmp_path)
    other = diagnose_text("epoch 4 done in 31.2 s\nsaved checkpoint to /w/ckpt\n", tmp_path)
    assert first.signature == other.signature == "v3|no-error||"
    assert diagnose_text("step 1 loss 2.30\n", tmp_path, exit_code=0).signature == "v3|exit 0||"
    failed = diagnose_text("step 1 loss 2.30\nfailed to open shard 3\n", tmp_path, exit_code=2)
    assert failed.signature == "v3|exit 2|failed to open shard <n>|"


def test_ranks_killed_from_outside_read_crash_or_hang(tmp_path: Path) -> None:
    log = ("0: step: 120  loss: 3.1021\n1: step: 120  loss: 3.1102\n"
           "1: slurmstepd-n2: error: Detected 1 oom-kill event(s) in StepId=41.0. Some of your processes may have "
           "been killed by the cgroup out-of-memory handler.\n"
           "0: slurmstepd-n1: error: *** STEP 41.0 ON n1 CANCELLED AT 2026-03-04T07:20:03 ***\n")
    d = diagnose_text(log, tmp_path)
    assert {k: v.outcome for k, v in d.ranks.items()} == {"0": "crash", "1": "crash"}
    timed = diagnose_text(log.replace("07:20:03 ***", "07:20:03 DUE TO TIME LIMIT ***"), tmp_path)
    assert timed.ranks["0"].outcome == "hang" and timed.ranks["1"].outcome == "crash"


def test_glibc_and_nccl_name_which_failure_it_was(tmp_path: Path) -> None:
    double = diagnose_text("step 3\ndouble free or corruption (!prev)\nAborted (core dumped)\n", tmp_path)
    invalid = diagnose_text("step 3\nfree(): invalid pointer\nAborted (core dumped)\n", tmp_path)
    assert double.category == invalid.category == "crash" and double.signature != invalid.signature
    nccl = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
            "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure {}\n")
    oom = diagnose_text(nccl.format("'out of memory'"), tmp_path)
    arg = diagnose_text(nccl.format("1 'invalid argument'"), tmp_path)
    assert oom.category == "cuda_oom" and oom.signature == "v3|nccl-cuda-failure out-of-memory||"
    assert arg.category == "cuda_error" and arg.signature == "v3|nccl-cuda-failure invalid-argument||"
