"""Pages before workflows, in a process that serves the console and runs durable tickets.

``tether serve`` runs the web console (uvicorn's loop, the main thread) and the durable
workflows (DBOS's loop, a thread of its own) in one interpreter, so they share one GIL.
:class:`PagesFirst` gives the pages the first place:

* the web app counts the requests in flight (:meth:`PagesFirst.entered` when a request
  reaches it, :meth:`PagesFirst.left` when its response starts: the page's work is done).
  The pages are *busy* while a request is in flight or one came or went less than
  ``quiet`` seconds ago (the next one of a busy console is already on its way: it waits
  in the socket for the loop to read it);
* a durable step, before its body, calls :meth:`PagesFirst.give_way`. While the pages
  are not busy it returns at once. While they are, the step waits for its turn: the
  steps' turns come one at a time, ``spacing`` seconds apart. The workflows so keep
  ``1 / spacing`` steps a second however busy the pages are (they never starve), and a
  step waits at most ``spacing`` times its place among the waiting steps. A waiting step
  looks again every ``LOOK`` seconds at most (few wake-ups: each takes the GIL from the
  pages): once the pages are no longer busy, it goes without waiting for its turn.

A desk whose web app runs elsewhere (a ``tether worker`` process, ``--workers N``)
counts nothing here: its steps never wait.
"""

from __future__ import annotations

import asyncio
import threading
import time

SPACING = 0.1
"""Seconds between two steps' turns while the pages are busy (measured: see
docs/durable.md, "Pages first")."""
QUIET = 0.02
"""Seconds without a request after which the pages are no longer busy."""
LOOK = 0.1
"""Seconds at most between two looks of a waiting step at the pages."""


class PagesFirst:
    """The requests in flight (thread-safe), and the steps that give way to them."""

    def __init__(self, spacing: float = SPACING, quiet: float = QUIET) -> None:
        self.spacing = spacing
        """Seconds between two steps' turns while the pages are busy."""
        self.quiet = quiet
        """Seconds without a request after which the pages are no longer busy."""
        self._lock = threading.Lock()
        self._in_flight = 0
        self._seen = float("-inf")
        self._next_turn = float("-inf")

    @property
    def in_flight(self) -> int:
        """Requests the web app is working on now."""
        return self._in_flight

    def busy(self) -> bool:
        """Whether a request is in flight, or one came or went less than ``quiet`` ago."""
        return self._in_flight > 0 or time.monotonic() - self._seen < self.quiet

    def entered(self) -> None:
        """A request reached the web app."""
        with self._lock:
            self._in_flight += 1
            self._seen = time.monotonic()

    def left(self) -> None:
        """A request's response started (or the request ended without one)."""
        with self._lock:
            self._in_flight -= 1
            self._seen = time.monotonic()

    async def give_way(self) -> None:
        """Return once the pages are not busy or this step's turn came (see the module)."""
        if not self.busy():
            self._next_turn = float("-inf")  # a busy spell to come owes no turn
            return
        with self._lock:
            turn = max(time.monotonic(), self._next_turn) + self.spacing
            self._next_turn = turn
        while (left := turn - time.monotonic()) > 0:
            await asyncio.sleep(min(left, LOOK))  # few wake-ups: each takes the GIL
            if not self.busy():
                self._next_turn = float("-inf")
                return
