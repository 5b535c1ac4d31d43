"""Reading a pickle a user handed over without running it: plain containers only.

A flight-recorder dump is `pickle.dumps` of dicts, lists, tuples, strings, numbers, booleans and None, so a
dump needs no global at all: every opcode that could name a callable (GLOBAL, STACK_GLOBAL, INST, OBJ, the
EXT codes through copyreg, persistent ids) goes through find_class or persistent_load, and both refuse.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


class RefusedPickle(ValueError):
    """The pickle names a class or function: it is not plain data, and is not loaded."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"it names {module}.{name}; a flight-recorder dump holds plain containers only")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it holds a persistent id; a flight-recorder dump holds plain containers only")


def loads_plain(data: bytes) -> Any:
    """The object a pickle of plain containers holds; RefusedPickle for anything naming code,
    ValueError for bytes that are no pickle."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except RefusedPickle:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError, UnicodeDecodeError, OverflowError) as exc:
        raise ValueError(f"not a readable pickle ({type(exc).__name__}: {str(exc)[:120]})") from None
