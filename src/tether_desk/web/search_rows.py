"""The search results' rows as HTML, each rendered once for what it shows.

A row depends only on its :class:`~tether_desk.search.Hit` (the ticket's line and the
excerpt of the message that matched), so the latest :data:`ROWS` of them are kept, keyed
by the hit itself: a ticket that changed (status, subject) or matched another message
is another hit, rendered anew.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from markupsafe import Markup

from tether_desk.search import Hit
from tether_desk.web.app import templates

ROWS = 4096
"""Rows kept (a few hundred bytes each)."""


@lru_cache(maxsize=ROWS)
def row_html(hit: Hit) -> Markup:
    """One ``<tr>`` of the results (its values escaped by the template)."""
    html: Markup = _row_macro()(hit)
    return html


@lru_cache(maxsize=1)
def _row_macro() -> Any:
    """The template's ``row`` macro (its module made once)."""
    return templates.env.get_template("search_row.html").module.row  # type: ignore[attr-defined]


def search_rows(hits: Sequence[Hit]) -> Markup:
    """The results' rows as HTML, in order, each on a line of its own."""
    return Markup("".join([f"\n    {row_html(h)}\n  " for h in hits]))
