"""torch.distributed's collectives (data/collectives.yaml): the calls a stack waits in, the ops whose sizes agree."""

from __future__ import annotations

from functools import lru_cache

from rootcause.tools.vocabulary.symptoms import read_data


@lru_cache(maxsize=1)
def _table() -> dict[str, frozenset[str]]:
    import yaml

    data = yaml.safe_load(read_data("collectives.yaml"))
    return {key: frozenset(data[key]) for key in ("calls", "sized")}


def collective_calls() -> frozenset[str]:
    return _table()["calls"]


def sized_ops() -> frozenset[str]:
    return _table()["sized"]
