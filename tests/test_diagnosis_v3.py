"""Signature v3 (DESIGN, "Signature (v3: two levels)") and the field's log shapes of issue 23, each on a minimal log
in its real shape: group and call site, evidence, elastic error files, banners, counters, short climbs, warnings."""

from __future__ import annotations

import json
from pathlib import Path

from rootcause.tools.observe.diagnosis import SIGNATURE_VERSION, diagnose_text
from rootcause.tools.observe.diagnosis.signature import identity, parameterise

OOM = ("Traceback (most recent call last):\n"
       '  File "/home/{who}/{proj}/train.py", line 50, in <module>\n    main()\n'
       '  File "/home/{who}/{proj}/{engine}.py", line 44, in {caller}\n    loss = model(batch).loss\n'
       '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1511, in _call_impl\n'
       "    return forward_call(*args, **kwargs)\n"
       '  File "/home/{who}/{proj}/model.py", line 12, in forward\n    h = self.mlp(x)\n'
       '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py", line 2, in linear\n'
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib} GiB. GPU 0 has a total capacity of "
       "23.64 GiB of which 312.00 MiB is free.\n")


def test_group_and_signature_identify_the_bug_and_its_call_site(tmp_path: Path) -> None:
    ann = diagnose_text(OOM.format(who="ann", proj="llm", engine="engine", caller="run_epoch", gib="2.00"), tmp_path)
    bob = diagnose_text(OOM.format(who="bob", proj="llm", engine="engine", caller="run_epoch", gib="1.50"), tmp_path)
    other = diagnose_text(OOM.format(who="cy", proj="vit", engine="loop", caller="fit", gib="2.00"), tmp_path)
    # One bug from two machines: both identities agree; module:function does not depend on the checkout's path.
    assert ann.signature == bob.signature == \
        f"{SIGNATURE_VERSION}|cuda-oom|CUDA out of memory|train:<module>>engine:run_epoch>model:forward"
    # Another project's OOM: the same group (a template keeps its words, never just "cuda-oom"), another signature.
    assert ann.group == other.group == f"{SIGNATURE_VERSION}|cuda-oom|CUDA out of memory"
    assert other.signature.endswith("|train:<module>>loop:fit>model:forward") and other.signature != ann.signature
    assert ann.evidence == ["exception"]


def test_the_call_site_is_the_top_three_in_app_frames_and_never_empty_identities(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n" + "".join(
        f'  File "/srv/job/{name}.py", line {i}, in f{i}\n    f{i + 1}()\n' for i, name in enumerate("abcde"))
        + '  File "/usr/lib/python3.10/json/decoder.py", line 3, in decode\n'
        "ValueError: bad value 3\n")
    d = diagnose_text(log, tmp_path)
    assert d.signature == f"{SIGNATURE_VERSION}|ValueError|bad value <n>|c:f2>d:f3>e:f4"
    # A Megatron checkout is a framework wherever it lies; the reporter's script is in-app.
    megatron = ("Traceback (most recent call last):\n"
                '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 9, in <module>\n    pretrain()\n'
                '  File "/workspace/Megatron-LM/megatron/training/training.py", line 5, in pretrain\n    x()\n'
                "AssertionError: bad config\n")
    assert diagnose_text(megatron, tmp_path).signature.endswith("|pretrain_gpt:<module>")
    # A Windows Python's own library is no call site; the reporter's script on another drive is.
    windows = ("Traceback (most recent call last):\n  File \"D:\\proj\\train.py\", line 3, in main\n    run()\n"
               "  File \"C:\\Users\\a\\Python310\\lib\\threading.py\", line 9, in run\n"
               "ValueError: bad value 3\n")
    assert diagnose_text(windows, tmp_path).signature.endswith("|train:main")
    empty = identity("", "", [])
    assert empty.group == f"{SIGNATURE_VERSION}|unknown|" and empty.signature == f"{empty.group}|"


def test_what_tells_two_messages_apart_stays_and_how_they_were_written_goes() -> None:
    assert parameterise("found at least two devices, cuda:0 and cpu!") == \
        parameterise("found at least two devices, cuda:1 and cpu")
    assert parameterise("No such file: /home//ann/data/x.bin") == parameterise("No such file: /data/b/y.bin")
    assert parameterise("Error(s) in loading state_dict for DistributedDataParallel: Missing key(s)") == \
        parameterise("Error(s) in loading state_dict for DataParallel: Missing key(s)")
    assert parameterise("loading state_dict for GPTModel") != parameterise("loading state_dict for Transformer")
    assert parameterise("cannot import name 'x' from 'transformers.utils' (/usr/lib/python3/dist-packages/transf") == \
        parameterise("cannot import name 'x' from 'transformers.utils' (/opt/t/transformers/utils/__init__.py)")


def test_an_elastic_error_file_anywhere_in_a_log_is_read_as_its_traceback(tmp_path: Path) -> None:
    stack = ('Traceback (most recent call last):\n'
             '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 794, in main\n'
             '    run(args)\n'
             '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/rendezvous/'
             'dynamic_rendezvous.py", line 671, in run\n    raise RendezvousTimeoutError\n'
             'torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n')
    error_file = {"message": {"message": "RendezvousTimeoutError: ",
                              "extraInfo": {"py_callstack": stack, "timestamp": "1712345678"}}}
    log = f"INFO:torch.distributed.run:starting\n[default0]:{json.dumps(error_file)}\n[default0]:exiting\n"
    d = diagnose_text(log, tmp_path)
    assert d.category == "distributed_error" and d.exception_type.endswith("RendezvousTimeoutError")
    assert d.message == "(raised without a message)" and "File" not in d.one_line()
    assert d.group == f"{SIGNATURE_VERSION}|RendezvousTimeoutError|"
    with_message = json.dumps({"message": {"message": "RendezvousTimeoutError: no quorum after 600 s",
                                           "extraInfo": {"py_callstack": stack}}})
    assert diagnose_text(with_message + "\n", tmp_path).message == "no quorum after 600 s"


def test_a_banner_carries_the_message_when_its_traceback_is_cut(tmp_path: Path) -> None:
    log = ("2024-12-29T15:37:17.690360 - !!! Exception during processing !!! mat1 and mat2 shapes cannot be "
           "multiplied (154x2048 and 4096x1152)\n2024-12-29T15:37:17.692360 - Traceback (most recent call last):\n"
           '  File "C:\\ComfyUI\\execution.py", line 327, in execute\n    output = get_output_data(obj)\n'
           '  File "C:\\ComfyUI\\comfy\\ops.py", line 70, in forward\n    return F.linear(x, w)\n')
    d = diagnose_text(log, tmp_path)
    assert d.category == "shape_mismatch" and d.message.startswith("mat1 and mat2 shapes cannot be multiplied")


def test_counters_are_not_values(tmp_path: Path) -> None:
    line = (" iteration {i}/ 500 | lm loss: 1.09E+01 | grad norm: 12.3 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |\n")
    d = diagnose_text("".join(line.format(i=i) for i in range(1, 4)), tmp_path)
    assert d.category == "python_exception" and d.signature == f"{SIGNATURE_VERSION}|no-error||"
    counted = diagnose_text(line.format(i=1).replace("nan iterations:   0", "nan iterations:   3"), tmp_path)
    assert counted.category == "nonfinite" and counted.evidence == ["keywords"]
    assert counted.one_line().startswith("[nonfinite] from keywords alone: ")


def test_a_short_finite_climb_is_a_gradient_explosion_with_its_rule(tmp_path: Path) -> None:
    climb = "".join(f"iteration {i} | lm loss: 10.{i} | grad norm: {g}\n"
                    for i, g in enumerate([8.1, 987.3, 1022.0, 954.9, 1003.2], start=1))
    d = diagnose_text(climb, tmp_path)
    assert d.category == "gradient_explosion" and d.evidence == ["metrics"]
    assert d.message.startswith("from the grad_norm series alone (5 points): ")
    assert "two orders of magnitude above the first step" in d.message or "climbing 4x or more" in d.message
    loss = "".join(f"step {i} | loss {v}\n" for i, v in enumerate([2.4, 2.2, 2.3, 2.5, 11.2], start=1))
    assert diagnose_text(loss, tmp_path).category == "gradient_explosion"
    healthy = "".join(f"step {i} | loss {v} | grad_norm {g}\n"
                      for i, (v, g) in enumerate([(10.4, 30.2), (8.0, 14.1), (7.0, 9.0), (6.2, 5.7)], start=1))
    assert diagnose_text(healthy, tmp_path).category == "python_exception"


def test_a_warning_is_never_the_root_when_an_error_it_reports_is_present(tmp_path: Path) -> None:
    log = ("/opt/conda/lib/python3.10/site-packages/accelerate/utils/memory.py:140: UserWarning: Caught CUDA out of "
           "memory. Tried to allocate 2.00 GiB. Retrying with a smaller batch size.\n  warnings.warn(\n"
           + OOM.format(who="ann", proj="llm", engine="engine", caller="run_epoch", gib="1.00"))
    d = diagnose_text(log, tmp_path)
    assert d.category == "cuda_oom" and d.exception_type == "torch.OutOfMemoryError"
    alone = diagnose_text(log.split("\n  warnings.warn(")[0] + "\n", tmp_path)
    assert alone.category == "cuda_oom" and alone.exception_type == "UserWarning"


def test_batch_9_general_rules(tmp_path: Path) -> None:
    # A launcher's tag without a role (`[0]:`) on every line is a rank prefix: the traceback behind it is read.
    tagged = "".join(f"[0]:{line}\n" for line in (
        "Traceback (most recent call last):", '  File "/w/load.py", line 3, in main', "    load()",
        "megatron.core.dist_checkpointing.core.CheckpointingException: Invalid access pattern for ShardedTensor(x)"))
    d = diagnose_text(tagged, tmp_path)
    assert d.category == "checkpoint_mismatch" and d.ranks["0"].outcome == "fail"
    # The line that names the failure sits above the launcher's abort banner.
    mpi = ("val loss 4.50\n[CUDA ERROR] at file train_gpt2.cu:961: an illegal memory access was encountered\n"
           "Primary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, the "
           "job has been aborted.\n")
    d = diagnose_text(mpi, tmp_path)
    assert d.category == "cuda_error" and d.message.startswith("[CUDA ERROR]") and d.evidence == ["keywords"]
    # A framework's name for the training loss (NeMo's reduced_train_loss) is the loss series.
    nemo = "".join(f"  0: Training epoch 0, iteration {i}/4679 | reduced_train_loss: {v}\n"
                   for i, v in enumerate([0.49, 0.51, 0.48, 0.46, 0.47, 0.51, 0.52, 0.50, 11.08, 10.9]))
    assert diagnose_text(nemo, tmp_path).category == "gradient_explosion"
    gather = "RuntimeError: Size does not match at dimension 0 expected index [269, 1] to be smaller than self [268]\n"
    assert diagnose_text(gather, tmp_path).category == "shape_mismatch"


def test_a_warning_raised_as_an_error_stays_the_root_under_a_wrapper(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 9, in load_config\n    warn(msg)\n"
           "UserWarning: key 'lr_warmup' is deprecated\n"
           "Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED\n")
    assert diagnose_text(log, tmp_path).exception_type == "UserWarning"
