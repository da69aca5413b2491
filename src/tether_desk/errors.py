"""The desk's errors: each carries one sentence for a person (what went wrong, what to do).

::

    DeskError
    ├── InvalidInput      bad input (a form field, an amount, an order number); HTTP 422
    ├── NotFound          nothing the caller may see has this id; HTTP 404
    ├── RuleViolation     a business rule refused the action (refund above what remains); 409
    ├── Conflict          someone else acted first, or it expired (an approval); HTTP 409
    │   └── Stale         the screen the action was taken on is out of date; HTTP 409
    └── RateLimited       too many attempts in a short time; HTTP 429
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


class Stale(Conflict):
    """The page the action came from shows an older state; ``changes`` says what changed."""

    def __init__(
        self,
        message: str,
        changes: list[str] | None = None,
        *,
        current: str = "",
        yours: str = "",
        back: str = "",
    ) -> None:
        super().__init__(message)
        self.changes = changes or []
        self.current = current
        """The text there is now (a draft), if any."""
        self.yours = yours
        """The text the person sent, kept so it is not lost."""
        self.back = back
        """The page that shows the current state."""


class RateLimited(DeskError):
    """Too many attempts; ``retry_after`` seconds until the next one is accepted."""

    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
