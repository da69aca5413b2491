"""The desk's errors: each carries one sentence for a person (what went wrong, what to do).

::

    DeskError
    ├── InvalidInput      bad input (a form field, an amount, an order number); HTTP 422
    ├── NotFound          nothing the caller may see has this id; HTTP 404
    ├── RuleViolation     a business rule refused the action (refund above what remains); 409
    └── Conflict          someone else acted first, or it expired (an approval); HTTP 409
"""

from __future__ import annotations


class DeskError(Exception):
    """Base of the desk's errors; ``str(exc)`` is the sentence to show."""

    status_code = 400


class InvalidInput(DeskError):
    """The input cannot be used as given."""

    status_code = 422


class NotFound(DeskError):
    """Nothing visible to the caller has this identifier."""

    status_code = 404


class RuleViolation(DeskError):
    """A business rule refused the action."""

    status_code = 409


class Conflict(DeskError):
    """The action was already taken, or came too late."""

    status_code = 409
