"""Money as integer cents: parsing what people type and showing it back."""

from __future__ import annotations

import re

from tether_desk.errors import InvalidInput

_AMOUNT = re.compile(r"(\d{1,7})(?:[.,](\d{1,2}))?", re.ASCII)
MAX_CENTS = 10_000_000_00


def format_cents(cents: int) -> str:
    """``8990`` -> ``"89.90"``."""
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def parse_amount(text: str) -> int:
    """``"89.90"``, ``"89,9"`` or ``"89"`` -> cents; ASCII digits only, at most 2 decimals."""
    match = _AMOUNT.fullmatch(text.strip())
    if match is None:
        raise InvalidInput(f"{text[:20]!r} is not an amount: write euros like 89.90.")
    whole, frac = match.group(1), (match.group(2) or "").ljust(2, "0")
    return int(whole) * 100 + int(frac)


def cents_from_float(value: float) -> int:
    """Euros from a tool argument (a JSON number) -> cents, rounded to the cent."""
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidInput("the amount is not a number.")
    return round(value * 100)
