"""Checks of a trace's top-level metadata (SPEC §1.3): ``deviceProperties``,
``distributedInfo``, ``baseTimeNanoseconds`` and the other top-level values.

Metadata is untrusted like everything in a trace file: a known field with the wrong type (a
device ``name`` that is a list, a ``rank`` that is an object) or an integer that no int64
holds (``totalGlobalMem: 2**64``, which the cache's JSON cannot write either) is ignored,
and :func:`checked_metadata` returns one note listing what was ignored. Unknown fields are
kept, minus their out-of-range integers.

Example: ``{"id": 0, "name": ["A100"], "numSms": 108}`` -> ``{"id": 0, "numSms": 108}`` and a
note naming ``deviceProperties[0].name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Note
from .columns import INT64_MAX, INT64_MIN

#: deviceProperties fields Kineto writes (CUDA and ROCm) -> the type each must have
DEVICE_FIELDS: dict[str, type] = {
    "id": int, "name": str, "totalGlobalMem": int, "computeMajor": int, "computeMinor": int,
    "maxThreadsPerBlock": int, "maxThreadsPerMultiprocessor": int, "regsPerBlock": int,
    "regsPerMultiprocessor": int, "warpSize": int, "sharedMemPerBlock": int,
    "sharedMemPerMultiprocessor": int, "numSms": int, "sharedMemPerBlockOptin": int,
    "maxSharedMemoryPerMultiProcessor": int,
}
#: distributedInfo fields -> the type each must have
DISTRIBUTED_FIELDS: dict[str, type] = {
    "rank": int, "world_size": int, "backend": str, "pg_count": int, "nccl_version": str,
}
#: how many ignored fields a note names (the rest are counted), and at most how long each
NOTE_NAMES, NOTE_NAME_CHARS = 5, 80
_DROP = object()


@dataclass
class Metadata:
    """Checked top-level metadata of one trace file."""

    device_properties: list[dict] = field(default_factory=list)
    distributed_info: dict = field(default_factory=dict)
    #: other top-level values (schemaVersion, baseTimeNanoseconds, with_stack, ...)
    other: dict = field(default_factory=dict)
    #: ``baseTimeNanoseconds`` when usable (an int in int64 range), else 0
    base_ns: int = 0
    #: where ignored values were, e.g. ``deviceProperties[0].name``
    ignored: list[str] = field(default_factory=list)


def checked_metadata(device_properties: Any, distributed_info: Any, other: dict) -> Metadata:
    """Check the decoded top-level values (see the module doc); ``other``: the remaining
    top-level keys (None values left out)."""
    out = Metadata()
    if isinstance(device_properties, list):
        for k, entry in enumerate(device_properties):
            where = f"deviceProperties[{k}]"
            if isinstance(entry, dict):
                out.device_properties.append(_fields(entry, DEVICE_FIELDS, where, out.ignored))
            else:
                out.ignored.append(where)
    elif device_properties is not None:
        out.ignored.append("deviceProperties")
    if isinstance(distributed_info, dict):
        out.distributed_info = _fields(distributed_info, DISTRIBUTED_FIELDS, "distributedInfo",
                                       out.ignored)
    elif distributed_info is not None:
        out.ignored.append("distributedInfo")
    out.other = _fields(other, {"baseTimeNanoseconds": int}, "", out.ignored)
    out.base_ns = out.other.get("baseTimeNanoseconds", 0)
    return out


def metadata_note(name: str, ignored: list[str]) -> Note:
    """The note saying which metadata values of file ``name`` were ignored."""
    shown = ", ".join(p if len(p) <= NOTE_NAME_CHARS else p[:NOTE_NAME_CHARS - 1] + "…"
                      for p in ignored[:NOTE_NAMES])
    more = f" and {len(ignored) - NOTE_NAMES:,} more" if len(ignored) > NOTE_NAMES else ""
    return Note("warning", "bad_metadata",
                f"{name}: ignored {len(ignored):,} top-level metadata value(s) of the wrong "
                f"type or out of range: {shown}{more}.")


def _fields(values: dict, types: dict[str, type], where: str, ignored: list[str]) -> dict:
    """``values`` without the known fields of the wrong type and out-of-range integers."""
    out = {}
    for key, value in values.items():
        path = f"{where}.{key}" if where else str(key)
        want = types.get(key)
        if want is not None and type(value) is not want:
            ignored.append(path)
            continue
        value = _in_range(value, path, ignored)
        if value is not _DROP:
            out[key] = value
    return out


def _in_range(value: Any, path: str, ignored: list[str]) -> Any:
    """``value`` without integers beyond int64 (nested lists and objects too); ``_DROP``
    when ``value`` itself is one."""
    if type(value) is int:
        if INT64_MIN <= value <= INT64_MAX:
            return value
        ignored.append(path)
        return _DROP
    if isinstance(value, list):
        kept = [_in_range(v, f"{path}[{k}]", ignored) for k, v in enumerate(value)]
        return [v for v in kept if v is not _DROP]
    if isinstance(value, dict):
        return _fields(value, {}, path, ignored)
    return value
