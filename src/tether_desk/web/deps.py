"""Request dependencies: the desk, and who may call a route.

They are ``async`` (they only read the request and the app's state): FastAPI runs a plain
``def`` dependency in a worker thread, a hop that costs more than the work."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from tether_desk.accounts import Principal
from tether_desk.pipeline import Desk
from tether_desk.tickets import TicketRate
from tether_desk.web.app import principal
from tether_desk.web.worker import TicketWorker


async def get_desk(request: Request) -> Desk:
    """The desk behind this app."""
    desk: Desk = request.app.state.desk
    return desk


async def get_worker(request: Request) -> TicketWorker:
    """The app's ticket worker."""
    worker: TicketWorker = request.app.state.worker
    return worker


def ticket_rate(request: Request) -> TicketRate:
    """How many tickets a customer may open, from the app's settings."""
    web = request.app.state.settings
    return TicketRate(web.tickets_per_window, web.ticket_window)


def _logged_in(request: Request) -> Principal:
    """The logged-in account; pages redirect to the login form, the API answers 401."""
    who = principal(request)
    if who is None:
        if request.url.path.startswith("/api/"):
            raise HTTPException(401, "Log in first.")
        raise HTTPException(303, "Log in first.", headers={"location": "/login"})
    return who


async def current(request: Request) -> Principal:
    """The logged-in account; pages redirect to the login form, the API answers 401."""
    return _logged_in(request)


async def customer_only(request: Request) -> Principal:
    """Customers only (one dependency, not one on :func:`current`: each level costs a
    resolution per request)."""
    who = _logged_in(request)
    if who.role != "customer":
        raise HTTPException(403, "This page is for customers.")
    return who


async def staff_only(request: Request) -> Principal:
    """Staff only (one dependency, like :func:`customer_only`)."""
    who = _logged_in(request)
    if who.role != "staff":
        raise HTTPException(403, "Only support staff can do this.")
    return who


DeskDep = Annotated[Desk, Depends(get_desk)]
WorkerDep = Annotated[TicketWorker, Depends(get_worker)]
Customer = Annotated[Principal, Depends(customer_only)]
Staff = Annotated[Principal, Depends(staff_only)]
Anyone = Annotated[Principal, Depends(current)]
