"""Serial keys: named resources whose calls never overlap, and run in the model's order.

A tool declares ``serial=`` with one of:

- ``True``: its own calls never overlap (a resource of its own);
- an argument name, ``serial="order_id"``: the resource ``order_id``, one per value of that
  argument. Every tool that declares ``"order_id"`` shares it: ``refund(order_id="W1")`` and
  ``cancel(order_id="W1")`` never overlap, calls on ``W2`` run beside them;
- :class:`Serial`, ``Serial(key="order", arg="id")``: the resource ``order`` keyed by the
  tool's argument ``id`` (tools whose arguments are named differently share it), or
  ``Serial(key="ledger")``: one resource for every call of every tool that declares it.

Calls on one resource run one at a time, in the order the model asked for them, across runs
of the process; when one of them waits for a human, the later ones on the same resource
wait with it (:mod:`tether.invoke`), so approval never reorders writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True, slots=True)
class Serial:
    """A named resource shared by every tool that declares it (see the module docstring)."""

    key: str
    """The resource's name; tools that declare the same name share it."""
    arg: str | None = None
    """The argument whose value selects one instance of the resource; ``None``: one."""


SerialSpec: TypeAlias = bool | str | Serial | None
"""What ``serial=`` accepts: ``True``, an argument name, a :class:`Serial`, or
``None``/``False`` (calls may run concurrently)."""

Resource: TypeAlias = tuple[str, ...]


def serial_argument(spec: SerialSpec) -> str | None:
    """The argument a declaration reads, if any (checked against the tool's parameters)."""
    if isinstance(spec, Serial):
        return spec.arg
    return spec if isinstance(spec, str) else None


def serial_resource(spec: SerialSpec, tool_id: int, arguments: Mapping[str, Any]) -> Resource:
    """The resource one call holds while it runs (``spec`` is not empty)."""
    if isinstance(spec, str):
        spec = Serial(spec, spec)
    if not isinstance(spec, Serial):
        return ("tool", str(tool_id))
    if spec.arg is None:
        return ("key", spec.key)
    value = json.dumps(arguments.get(spec.arg), sort_keys=True, default=str)
    return ("key", spec.key, value)
