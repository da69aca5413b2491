"""Accounts and passwords (argon2 through pwdlib), and who is logged in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import select

from tether_desk.db import Database
from tether_desk.models import Customer, Staff

Role = Literal["customer", "staff"]
_HASHER = PasswordHash((Argon2Hasher(),))
_DUMMY = _HASHER.hash("not a password anyone has")
MAX_PASSWORD = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is logged in: a role and an id (what the session cookie holds)."""

    role: Role
    id: int
    name: str
    email: str


def hash_password(password: str) -> str:
    """An argon2 hash of ``password``."""
    return _HASHER.hash(password)


def authenticate(db: Database, email: str, password: str) -> Principal | None:
    """The account whose e-mail and password match, else ``None`` (the same work is done
    whether or not the e-mail exists, so timing does not tell)."""
    email = email.strip().lower()[:254]
    if len(password) > MAX_PASSWORD:
        return None
    with db.read() as s:
        row: Customer | Staff | None = s.scalar(select(Customer).where(Customer.email == email))
        role: Role = "customer"
        if row is None:
            row = s.scalar(select(Staff).where(Staff.email == email))
            role = "staff"
    if row is None:
        _HASHER.verify(password, _DUMMY)
        return None
    if not _HASHER.verify(password, row.password_hash):
        return None
    return Principal(role, row.id, row.name, row.email)


def load_principal(db: Database, role: str, account_id: int) -> Principal | None:
    """The principal a session names, if that account still exists."""
    with db.read() as s:
        row: Customer | Staff | None
        if role == "customer":
            row = s.get(Customer, account_id)
        elif role == "staff":
            row = s.get(Staff, account_id)
        else:
            return None
        if row is None:
            return None
        return Principal("customer" if role == "customer" else "staff", row.id, row.name, row.email)
