"""The red-team domains: mail and calendar, banking, team chat, travel booking."""

from __future__ import annotations

from tether.redteam.domains.banking import BANKING
from tether.redteam.domains.chat import CHAT
from tether.redteam.domains.mail import MAIL
from tether.redteam.domains.travel import TRAVEL
from tether.redteam.world import Domain

__all__ = ["BANKING", "CHAT", "DOMAINS", "MAIL", "TRAVEL"]

DOMAINS: tuple[Domain, ...] = (MAIL, BANKING, CHAT, TRAVEL)
