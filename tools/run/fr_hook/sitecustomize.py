"""rootcause's flight-recorder hook: first on a run's PYTHONPATH, so every Python process of the run loads it.

It never imports torch and costs an interpreter nothing but this short file unless ROOTCAUSE_FR_DIR is set and
the process imports torch.distributed (`import torch` does): a meta-path finder notices that import, loads
watcher.py beside this file (by its path: no module of that name appears on sys.path) and starts its one
daemon thread, which looks for a process group once a second and dumps the rank's flight recorder when
rootcause triggers it. Forked children (DataLoader workers) have no thread; spawned ones load this file
again and find no process group.

Any other sitecustomize on the path still runs: this one imports it after itself.
Stdlib only, and no rootcause import: it runs in the user's interpreter, whatever its version.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain():  # no annotations: a Python 2 interpreter must still parse this file
    """Run the next sitecustomize on sys.path (the venv's, the distribution's), as if this one were absent."""
    # The path finder already on sys.meta_path: importing importlib.machinery would cost more than this file.
    finder = next((f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder"), None)
    if finder is None:
        return
    spec = finder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE])
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules["sitecustomize"] = ours  # site.py would report and go on; so do we
        raise


class _DistributedImported:
    """A meta-path finder that finds nothing: it only starts the watcher when torch.distributed is imported."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch.distributed":
            try:
                sys.meta_path.remove(cls)
            except ValueError:
                pass
            try:
                from importlib.util import module_from_spec, spec_from_file_location

                spec = spec_from_file_location("rootcause_fr_watcher", os.path.join(_HERE, "watcher.py"))
                watcher = module_from_spec(spec)
                spec.loader.exec_module(watcher)
                watcher.start()
            except Exception:
                pass  # the user's import of torch goes on, without the dump
        return None


if os.environ.get("ROOTCAUSE_FR_DIR") and sys.version_info >= (3, 4):  # find_spec finders: Python 3.4+
    sys.meta_path.insert(0, _DistributedImported)
_chain()
