"""Object graph <-> (JSON-able state, numpy arrays), so analysed results can be cached
without pickle.

:func:`pack` walks plain data (None, bool, int, float, str, list, tuple, dict) and objects
of stepscope's own classes (their ``__dict__``, or ``__slots__``), moving every numpy array
into a flat ``arrays`` dict (an array referenced twice is stored once). :func:`unpack`
rebuilds the graph; it only instantiates classes whose module is inside the ``stepscope``
package, without calling ``__init__``, so a tampered cache entry cannot run code.

Both walk the graph with a recursive closure, which refers to itself through its cell: a
reference cycle holding the ``arrays`` dict (every array packed, or loaded) until the next
garbage collection. Each drops the closure when done, so the arrays go with their last other
reference (issue 19: an analysis worker, idle after a 2024 x50 job and so not collecting,
kept its last timeline's arrays while the server loaded its own copy: RSS 1.0 -> 0.66 GB once
dropped).

A class may name fields that :func:`unpack` leaves packed (``_UNPACK_LATER``): they become
:class:`Later` objects, in the object's ``_later`` dict, which the class unpacks when first used
(with their arrays: ``arrays`` may load each array when first asked for, see
:meth:`stepscope.store.cache.Entry.preload`). The server so loads a cached timeline's per-event
tables only when an event is first looked up, not for its first window (issue 19, x200: 1.7 of
the 2.4 GB widened before the first ``trace/timeline`` answer).

Example::

    state, arrays = pack(Point(x=np.arange(3), label=("a", 1)))
    state  == {"@": "stepscope.geo:Point", "d": {"x": {"@a": "0"}, "label": {"@t": ["a", 1]}}}
    unpack(state, arrays).label == ("a", 1)
"""

from __future__ import annotations

import enum
import functools
import importlib
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

_PACKAGE = __name__.split(".")[0]  # "stepscope", wherever this module sits in it


class PackError(ValueError):
    """The value holds something that cannot be packed (or a state cannot be unpacked)."""


class LaterError(PackError):
    """A field left packed (:class:`Later`) could not be unpacked: its arrays are corrupt
    (``corrupt``), or could not be read (a file gone, too many open files...)."""

    def __init__(self, message: str, corrupt: bool):
        super().__init__(message)
        self.corrupt = corrupt


def pack(obj: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """``obj`` -> ``(state, arrays)``; ``state`` is JSON-able, arrays are named "0", "1", ..."""
    arrays: dict[str, np.ndarray] = {}
    by_id: dict[int, str] = {}

    def walk(v: Any) -> Any:  # recursion depth = nesting of containers, which is shallow
        t = type(v)
        if t in _AS_IS:  # most values: tested by exact type first (payloads are big trees)
            return v
        if t is float:
            return v if v == v and v not in _INFINITIES else {"@f": repr(v)}
        if t is list:
            return [x if type(x) in _AS_IS else walk(x) for x in v]
        if t is dict:
            if _plain_keys(v):
                return {k: x if type(x) in _AS_IS else walk(x) for k, x in v.items()}
            return {"@m": [[walk(k), walk(x)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, enum.Enum):
            return walk(v.value)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if f == f and f not in (float("inf"), float("-inf")) else {"@f": repr(f)}
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                raise PackError("object arrays cannot be cached")
            name = by_id.get(id(v))
            if name is None:
                name = by_id[id(v)] = str(len(arrays))
                arrays[name] = v
            return {"@a": name}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return {"@t": [walk(x) for x in v]}
        if isinstance(v, dict):
            if all(type(k) is str and not k.startswith("@") for k in v):
                return {k: walk(x) for k, x in v.items()}
            return {"@m": [[walk(k), walk(x)] for k, x in v.items()]}
        cls = type(v)
        if not cls.__module__.startswith(_PACKAGE + "."):
            raise PackError(f"cannot pack a {cls.__module__}.{cls.__qualname__}")
        got = v.__getstate__()  # a class may leave out what need not be cached
        if isinstance(got, tuple):  # (__dict__, slots) of a class with __slots__
            fields = {**(got[0] or {}), **(got[1] or {})}
        else:
            fields = dict(got or {})
        return {"@": f"{cls.__module__}:{cls.__qualname__}",
                "d": {k: walk(x) for k, x in fields.items()}}

    try:
        return walk(obj), arrays
    finally:
        walk = None  # noqa: F841 - the recursive closure's cycle (see the module doc)


def _plain_keys(d: dict) -> bool:
    """Are all keys of ``d`` strings not starting with ``@`` (a JSON object as it is)?"""
    try:
        joined = "\0".join(d)  # in C; a key that is no string raises
    except TypeError:
        return False
    return "\0@" not in "\0" + joined  # no key starts with @


#: Types stored as they are (exact types: a subclass such as an enum or ``np.float64``
#: goes through :func:`pack`'s general checks).
_AS_IS = frozenset((type(None), bool, str, int))
_INFINITIES = (float("inf"), float("-inf"))
#: What JSON decodes to besides lists and dicts: :func:`unpack` returns these as they are
#: without a call per value (rows of 11 fields: 0.37 -> 0.23 s per 200,000 rows).
_JSON_LEAVES = frozenset((type(None), bool, str, int, float))


def unpack(state: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """Inverse of :func:`pack` (``arrays`` may be read-only memory maps). The fields a class
    names in ``_UNPACK_LATER`` are left packed (:class:`Later`). ``arrays`` may load each
    array when first asked for; if it has a ``preload(names)`` method, it is first given
    every array name this call uses (to load them together)."""
    preload = getattr(arrays, "preload", None)
    if preload is not None:
        preload(refs(state))

    def walk(v: Any) -> Any:  # JSON values only: exact types, leaves not walked into
        if type(v) is list:
            return [x if type(x) in _JSON_LEAVES else walk(x) for x in v]
        if type(v) is not dict:
            return v
        if "@a" in v:
            return arrays[v["@a"]]
        if "@t" in v:
            return tuple(walk(x) for x in v["@t"])
        if "@m" in v:
            return {_hashable(walk(k)): walk(x) for k, x in v["@m"]}
        if "@f" in v:
            return float(v["@f"])
        if "@" in v:
            cls = _class(v["@"])
            obj = cls.__new__(cls)
            later = _later_fields(cls)
            for k, x in v["d"].items():
                if k not in later:
                    object.__setattr__(obj, k, walk(x))
            if later:
                object.__setattr__(obj, "_later", {k: Later(x, arrays) for k, x in v["d"].items()
                                                   if k in later})
            return obj
        return {k: x if type(x) in _JSON_LEAVES else walk(x) for k, x in v.items()}

    try:
        return walk(state)
    finally:
        walk = None  # noqa: F841 - the recursive closure's cycle (see the module doc)


def refs(state: Any) -> set[str]:
    """Names of the arrays :func:`unpack` takes for ``state`` (not those of fields it leaves
    packed)."""
    out: set[str] = set()
    todo = [state]
    while todo:
        v = todo.pop()
        if isinstance(v, list):
            todo += v
        elif isinstance(v, dict):
            if "@a" in v:
                out.add(v["@a"])
            elif "@" in v:
                later = _later_fields(_class(v["@"]))
                todo += [x for k, x in v["d"].items() if k not in later]
            else:
                todo += v.values()
    return out


class Later:
    """A field that :func:`unpack` left packed; calling it unpacks it (once, whichever thread
    asks first) and returns the value."""

    def __init__(self, state: Any, arrays: Mapping[str, np.ndarray]):
        self._state = state
        self._arrays = arrays
        self._value: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            if self._arrays is not None:
                try:
                    self._value = unpack(self._state, self._arrays)
                except (OSError, KeyError, ValueError) as e:
                    raise LaterError(f"a part left packed cannot be unpacked: {e}",
                                     corrupt=not isinstance(e, OSError)) from e
                self._state = self._arrays = None
            return self._value


def _later_fields(cls: type) -> tuple[str, ...]:
    return getattr(cls, "_UNPACK_LATER", ())


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


@functools.cache
def _class(ref: str) -> type:
    """The class named ``ref`` (``module:qualname``), if it is one of this package's."""
    module, _, qualname = ref.partition(":")
    if module != _PACKAGE and not module.startswith(_PACKAGE + "."):
        raise PackError(f"refusing to create {ref}: not a {_PACKAGE} class")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise PackError(f"{ref} is not a class")
    return obj
