"""The helpdesk's settings: how long a customer may reopen, the waiting-time target."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class HelpdeskSettings:
    """Settings of conversations and the inbox (defaults here, nowhere else)."""

    reopen_window: timedelta = timedelta(days=14)
    """How long after a reply the customer may answer it and reopen the ticket."""
    wait_target: timedelta = timedelta(hours=4)
    """How long a customer should wait at most for an answer; the inbox marks rows past it."""
