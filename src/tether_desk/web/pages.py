"""Counts the console's requests in flight, for the durable steps that give way to them
(:mod:`tether_desk.priority`)."""

from __future__ import annotations

from tether_desk.priority import PagesFirst
from tether_desk.web.security import ASGIApp, Message, Receive, Scope, Send


class CountPages:
    """A request is in flight from when it reaches the app until its response starts
    (a page's work is done by then; a stream of events is counted until it opens)."""

    def __init__(self, app: ASGIApp, pages: PagesFirst) -> None:
        self.app = app
        self.pages = pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pages = self.pages
        counted = True
        pages.entered()

        async def sending(message: Message) -> None:
            nonlocal counted
            if counted and message["type"] == "http.response.start":
                counted = False
                pages.left()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if counted:
                pages.left()
