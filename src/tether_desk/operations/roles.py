"""The operator role: staff accounts that see the console's runs page and act on runs,
kept as a list of staff ids in the desk's ``settings`` table (``operators``)."""

from __future__ import annotations

import json

from sqlalchemy import select

from tether.errors import ConfigError
from tether_desk.db import Database
from tether_desk.models import Setting, Staff

KEY = "operators"


def operators(db: Database) -> set[int]:
    """The staff ids with the operator role."""
    with db.read() as s:
        row = s.get(Setting, KEY)
        return set(json.loads(row.value)) if row is not None else set()


def is_operator(db: Database, staff_id: int) -> bool:
    return staff_id in operators(db)


def set_operator(db: Database, email: str, on: bool = True) -> None:
    """Give (or take away) the operator role of the staff account ``email``."""
    with db.write() as s:
        staff_id = s.scalar(select(Staff.id).where(Staff.email == email.strip().lower()))
        if staff_id is None:
            raise ConfigError(f"there is no staff account {email!r}")
        row = s.get(Setting, KEY)
        ids = set(json.loads(row.value)) if row is not None else set()
        ids = ids | {staff_id} if on else ids - {staff_id}
        value = json.dumps(sorted(ids))
        if row is None:
            s.add(Setting(key=KEY, value=value))
        else:
            row.value = value
