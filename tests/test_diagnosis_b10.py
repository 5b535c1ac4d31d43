"""The rules held-out batch 10 asked for (issue 23), each on a minimal log in another project's words than the batch's:
a comms library's collective mismatch, a device that does not match, a library's native setup failing at import, the
C++ runtime's abort after a Python traceback, a non-finite series' name as its site, a column table's NaN; and two for
older sets' same-bug misses: a weights_only refusal relayed in a wrapper's words, a LoRA parameter's model path."""

from __future__ import annotations

from pathlib import Path

from rootcause.tools.observe.diagnosis import diagnose_text
from rootcause.tools.observe.diagnosis.models import group_of

TB = ("Traceback (most recent call last):\n"
      '  File "/home/{who}/proj/train.py", line 40, in <module>\n    main()\n'
      '  File "/home/{who}/proj/train.py", line 31, in main\n    step(batch)\n'
      "{error}\n")


def test_a_comms_library_reporting_mismatched_collectives_is_a_distributed_error(tmp_path: Path) -> None:
    # Horovod's PyTorch binding (not the TensorFlow one of the batch), prefixed by mpirun's tags.
    def log(rank: int, what: str) -> str:
        error = f"RuntimeError: Mismatched allgather {what}"
        return "".join(f"[1,{rank}]<stderr>:{line}\n" for line in TB.format(who="kim", error=error).splitlines())

    sizes = diagnose_text(log(3, "tensor sizes: One rank sent a tensor with first dimension 32, but another rank "
                                 "sent a tensor with first dimension 16."), tmp_path)
    again = diagnose_text(log(1, "tensor sizes: One rank sent a tensor with first dimension 8, but another rank "
                                 "sent a tensor with first dimension 4."), tmp_path)
    types = diagnose_text(log(3, "data types: One rank sent int64, but another rank sent float32."), tmp_path)
    assert sizes.category == again.category == types.category == "distributed_error"
    assert sizes.group == again.group and sizes.group != types.group
    # Words for what the ranks disagree on do not make it a shape / dtype bug of one rank.
    bcast = diagnose_text("oneccl: RuntimeError: mismatched broadcast root: rank 2 used root 0, rank 5 used root 1\n",
                          tmp_path)
    assert bcast.category == "distributed_error"


def test_a_device_that_does_not_match_is_device_mismatch(tmp_path: Path) -> None:
    error = ("ValueError: Embedding table device does not match the input's device: table on cuda:1, "
             "indices on cuda:0")
    assert diagnose_text(TB.format(who="lee", error=error), tmp_path).category == "device_mismatch"
    assert diagnose_text("AssertionError: devices don't match: cpu vs cuda:0\n", tmp_path).category == \
        "device_mismatch"
    # A count of devices that does not match is a configuration error, not tensors on two devices.
    count = diagnose_text("ValueError: The number of devices does not match the mesh shape (8 vs 4)\n", tmp_path)
    assert count.category != "device_mismatch"


def test_a_librarys_native_setup_failing_at_import_is_an_import_error(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/srv/ft/run.py", line 3, in <module>\n    import fastkern\n'
           '  File "/opt/env/lib/python3.11/site-packages/fastkern/__init__.py", line 9, in <module>\n'
           "    raise RuntimeError(\n"
           "RuntimeError: Native setup failed: no fastkern binary matches CUDA 12.4 on this machine. "
           "Build it from source.\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "import_error" and d.exception_type == "RuntimeError"


def test_the_runtimes_abort_after_a_traceback_is_not_part_of_its_message(tmp_path: Path) -> None:
    # A Python error, then the C++ runtime aborting at exit: the abort's words (NCCL here) are not the error's.
    error = ("KeyError: 'attention_mask'\n"
             "terminate called after throwing an instance of 'std::runtime_error'\n"
             "  what():  NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.18.1")
    d = diagnose_text(TB.format(who="ray", error=error), tmp_path)
    assert d.category == "python_exception" and d.exception_type == "KeyError"
    assert "terminate" not in d.message and "NCCL" not in d.group
    # The shell's and glibc's reports of the same exit are not the error's words either.
    for tail in ("Segmentation fault (core dumped)", "free(): invalid pointer"):
        exited = diagnose_text(TB.format(who="ray", error=f"KeyError: 'attention_mask'\n{tail}"), tmp_path)
        assert exited.exception_type == "KeyError" and tail not in exited.message


def test_a_nonfinite_series_name_is_its_site(tmp_path: Path) -> None:
    def log(name: str, host: str) -> str:
        return "".join(f"[{host}] it {i:4d} | lr 1.0e-04 | {name}: {v} | data 0.01\n"
                       for i, v in ((100, "0.812"), (110, "0.806"), (120, "nan"), (130, "nan")))

    recon = diagnose_text(log("recon_loss", "gpu-a"), tmp_path)
    recon_again = diagnose_text(log("recon_loss", "node17"), tmp_path)
    plain = diagnose_text(log("loss", "gpu-a"), tmp_path)
    assert recon.category == plain.category == "nonfinite"
    # One failure kind (the group), two series in two projects' code (the signature); one project's twice agrees.
    assert recon.group == plain.group == group_of(recon.signature)
    assert recon.signature != plain.signature and recon.signature == recon_again.signature
    assert recon.signature.endswith("|recon_loss")


def test_a_nan_in_a_column_table_is_read_from_the_series(tmp_path: Path) -> None:
    # A progress table whose header names the columns: no line says "loss: nan", the series does.
    rows = [("1/20", "0.913", "0.402"), ("2/20", "0.871", "0.388"), ("3/20", "nan", "nan"), ("4/20", "nan", "nan")]
    log = "Starting training for 20 epochs...\n\n" + "".join(
        f"      Epoch   seg_loss   aux_loss  Instances\n       {e}   {a:>8}   {b:>8}         12: 100%|#####| 40/40\n"
        for e, a, b in rows)
    d = diagnose_text(log, tmp_path)
    assert d.category == "nonfinite" and d.evidence == ["metrics"]
    assert "seg_loss" in d.message and d.signature.endswith("|seg_loss")
    # Finite throughout: nothing to report from the numbers.
    finite = diagnose_text(log.replace("nan", "0.5"), tmp_path)
    assert finite.category != "nonfinite"


def test_a_weights_only_refusal_is_one_failure_whoever_relays_it(tmp_path: Path) -> None:
    refusal = ("Weights only load failed. This file can still be loaded, to do so you have two options.\n"
               "\tWeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global")
    raised = diagnose_text(TB.format(who="ann", error=f"_pickle.UnpicklingError: {refusal}"), tmp_path)
    relayed = diagnose_text(f"2025-03-02 10:11:12 ERROR [model_manager] checkpoint refused: {refusal}\n", tmp_path)
    assert raised.category == relayed.category == "checkpoint_mismatch"
    assert raised.group == relayed.group


def test_a_lora_parameters_model_path_is_not_the_bug(tmp_path: Path) -> None:
    def log(param: str) -> str:
        error = (f"RuntimeError: Error(s) in loading state_dict for PeftModel:\n\tsize mismatch for {param}: copying "
                 "a param with shape torch.Size([0]) from checkpoint, the shape in current model is "
                 "torch.Size([8, 2048]).")
        return TB.format(who="bo", error=error)

    mistral = diagnose_text(log("base_model.model.model.layers.7.self_attn.v_proj.lora_B.default.weight"), tmp_path)
    falcon = diagnose_text(log("base_model.model.transformer.h.2.self_attention.dense.lora_B.default.weight"),
                           tmp_path)
    embed = diagnose_text(log("base_model.model.model.embed_tokens.weight"), tmp_path)
    assert mistral.category == falcon.category == embed.category == "checkpoint_mismatch"
    assert mistral.group == falcon.group and "lora_B" in mistral.group
    # A model's own parameter keeps its name: a vocabulary resize is another bug.
    assert embed.group != mistral.group and "embed_tokens" in embed.group


def test_a_reports_stack_trace_after_its_error_fields_is_its_call_site(tmp_path: Path) -> None:
    # An error page's fields first, its frames after (blank lines between them): the frames are the error's.
    def report(module: str, func: str) -> str:
        return ("Error summary\n"
                "Exception Type: RuntimeError\n"
                "Exception Value: shape '[4, -1, 64]' is invalid for input of size 1000\n\n"
                "Stack trace:\n"
                '  File "/app/server/handlers.py", line 88, in predict\n    out = pipe(x)\n\n'
                f'  File "/app/server/{module}.py", line 21, in {func}\n    return h.view(4, -1, 64)\n')

    a, b = diagnose_text(report("encoder", "forward"), tmp_path), diagnose_text(report("decoder", "step"), tmp_path)
    assert a.category == b.category == "shape_mismatch"
    assert a.group == b.group and a.signature != b.signature
    assert a.signature.endswith("handlers:predict>encoder:forward")


def test_a_runner_relaying_its_childs_exit_code_is_a_wrapper(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/env/lib/python3.10/site-packages/jobkit/runner.py", line 77, in run\n    raise RuntimeError(\n'
           "RuntimeError: 'torchrun --nproc_per_node 2 finetune.py' failed with returncode 1\n\n"
           "The combined stderr from workers follows:\n"
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
           "capacity of 23.64 GiB of which 1.02 GiB is free.\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "cuda_oom" and "returncode" not in d.message
    relayed = "RuntimeError: 'torchrun --nproc_per_node 2 finetune.py' failed with returncode 1"
    shell = diagnose_text(log.replace(relayed, "RuntimeError: Command 'torchrun finetune.py' returned non-zero exit "
                                               "status 1."), tmp_path)
    assert shell.category == "cuda_oom"


def test_a_trainers_dict_record_names_its_site_by_the_keys_it_logs(tmp_path: Path) -> None:
    def log(extra: str, host: str) -> str:
        steps = (("0.693", "1.25", "0.1"), ("0.0", "nan", "0.2"), ("0.0", "nan", "0.3"))
        return "".join(f"[{host}] {{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': 2e-05{extra}, "
                       f"'epoch': {e}}}\n" for loss, norm, e in steps)

    dpo = log(", 'rewards/chosen': 0.12, 'rewards/rejected': -0.3, 'logps/chosen': -212.5", "a100-1")
    dpo_again = log(", 'rewards/chosen': 0.5, 'rewards/rejected': -0.1, 'logps/chosen': -198.0", "h100-7")
    sft = log("", "a100-1")
    a, b, c = (diagnose_text(text, tmp_path) for text in (dpo, dpo_again, sft))
    assert a.category == b.category == c.category == "nonfinite"
    # One failure kind; a DPO trainer's record and an SFT one's are two places, one trainer's twice is one.
    assert a.group == b.group == c.group
    assert a.signature == b.signature != c.signature and "rewards/chosen" in a.signature


def test_a_cause_chain_without_a_traceback_is_told_by_its_innermost_cause(tmp_path: Path) -> None:
    """uv's / anyhow's `cause:` and `Caused by:` lines: the last is the failure, whatever its words; two chains that
    share their outer causes (`client error (Connect)`) are two groups."""
    head = ("error: Failed to fetch: https://10.0.0.5:8443/simple/torch/\n"
            "  cause: error sending request for url (https://10.0.0.5:8443/simple/torch/)\n"
            "  cause: client error (Connect)\n")
    tls = diagnose_text(head + "  cause: received corrupt message of type InvalidContentType\n", tmp_path, exit_code=2)
    refused = diagnose_text(head.replace("cause:", "Caused by:") + "  Caused by: tcp connect error: Connection refused "
                            "(os error 111)\n", tmp_path, exit_code=2)
    assert tls.message.endswith("received corrupt message of type InvalidContentType")
    assert refused.message.endswith("Connection refused (os error 111)")
    assert tls.group != refused.group
