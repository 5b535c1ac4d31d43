"""Small real projects for end-to-end tests: each builder is a plain function that creates a git repository
under the directory it is given and returns its root and the commits it made (oldest first).

- probe.make_probe_repo: a linear probe over a frozen backbone loaded from a checkpoint with
  load_state_dict(strict=False); a later commit renames the backbone's layer, so its weights silently stay
  at init and val_acc falls from ~0.93 to ~0.68 while the script exits 0.
- dcp_resume.make_dcp_repo: DDP on 2 gloo ranks (torchrun, CPU) saving a torch.distributed.checkpoint at
  step K and resuming from it; a later commit loads only the model, so the optimizer's momentum is lost and
  the loss leaves the uninterrupted run's (ref.log) from step K+2 while the job exits 0.
"""
