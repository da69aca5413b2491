"""The inbox's rows as HTML, each rendered once for what it shows.

An inbox page is mostly rows already seen: every open inbox asks for its page again every
five seconds, and a new ticket only shifts the others down a line. A row's HTML depends
only on the values :func:`row_html` takes (the ticket's line, whether its run needs
attention, the customer's wait in words, the assignee), so the latest :data:`ROWS` of them
are kept, keyed by exactly those values: a ticket that changed (status, assignee, the
wait's words, attention) has other values and its row is rendered anew.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

from markupsafe import Markup

from tether_desk.inbox import InboxPage
from tether_desk.tickets import Page, TicketRow
from tether_desk.web.app import templates

ROWS = 16_384
"""Rows kept (about 1 kB each): 655 pages of 25."""


@lru_cache(maxsize=ROWS)
def row_html(
    t: tuple[int, str, str, str, str, str | None, datetime],
    attention: bool,
    wait: str | None,
    late: bool,
    owner: str | None,
) -> Markup:
    """One ``<tr>`` of the inbox (its values escaped by the template); ``t``: the
    ticket's line as a plain tuple (hashed and compared in C)."""
    html: Markup = _row_macro()(TicketRow(*t), attention, wait, late, owner)
    return html


@lru_cache(maxsize=1)
def _row_macro() -> Any:
    """The template's ``row`` macro (its module made once)."""
    return templates.env.get_template("inbox_row.html").module.row  # type: ignore[attr-defined]


@lru_cache(maxsize=64)
def inbox_filters(status: str | None, assigned: str | None, statuses: tuple[str, ...]) -> Markup:
    """The inbox's filters with the chosen one marked (rendered once per choice)."""
    module: Any = templates.env.get_template("inbox_filters.html").module
    html: Markup = module.filters(status, assigned, statuses)
    return html


def inbox_rows(found: InboxPage, attention: Container[int]) -> Markup:
    """The page's rows as HTML, newest first, each on a line of its own."""
    waits, owners = found.waits, found.owners
    lines = []
    for t in found.page.rows:
        w = waits.get(t.id)
        line = (t.id, t.subject, t.order, t.customer, t.status, t.category, t.created_at)
        html = row_html(
            line,
            t.id in attention,
            None if w is None else w.words,
            w is not None and w.late,
            owners.get(t.id),
        )
        lines.append(f"\n    {html}\n  ")
    return Markup("".join(lines))


class _PagerAt(NamedTuple):
    """What the pager shows of a page (the macro reads these names)."""

    page: int
    pages: int
    newer: int | None
    older: int | None


def inbox_pager(page: Page, status: str | None, assigned: str | None) -> Markup:
    """The pager under the inbox's rows (its links keep the filters)."""
    base = "/staff/inbox?" + (f"status={status}&" if status else "")
    base += f"assigned={assigned}&" if assigned else ""
    return _pager(base, _PagerAt(page.page, page.pages, page.newer, page.older))


@lru_cache(maxsize=4096)
def _pager(base: str, at: _PagerAt) -> Markup:
    """The ``ticket_pager`` macro's HTML for one place in one list (rendered once)."""
    module: Any = templates.env.get_template("macros.html").module
    html: Markup = module.ticket_pager(at, base)
    return html
