"""What the staff ticket page shows beyond the ticket: its thread with notes, who it is
assigned to, the staff to assign it to, saved replies, and the draft's problems."""

from __future__ import annotations

from typing import Any

from tether_desk.assignment import assignee_of, staff_members
from tether_desk.db import Database
from tether_desk.draft_quality import problems
from tether_desk.saved_replies import saved_replies
from tether_desk.thread import thread
from tether_desk.tickets import draft_of


def helpdesk_context(db: Database, ticket_id: int) -> dict[str, Any]:
    """The staff ticket page's helpdesk parts."""
    draft = draft_of(db, ticket_id)
    flagged = problems(draft.body) if draft and draft.sent_at is None else []
    return {
        "thread": thread(db, ticket_id, staff=True),
        "assignee": assignee_of(db, ticket_id),
        "staff_members": staff_members(db),
        "saved_replies": saved_replies(db),
        "draft_problems": flagged,
        "draft_locked": bool(flagged) and draft is not None and draft.author == "agent",
    }
