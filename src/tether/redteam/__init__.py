"""Red-team harness: test an agent's setup against a model that obeys every injection.

``run_redteam()`` runs the built-in hardened scenarios and returns a report of attempted
versus achieved unauthorized effects; build your own :class:`Scenario` to test your agent.
"""

from tether.redteam.harness import (
    AttemptOutcome,
    RedTeamReport,
    Scenario,
    ScenarioReport,
    Setup,
    run_redteam,
    run_scenario,
    run_scenarios,
)
from tether.redteam.obedient import Instruction, ObedientModel, extract_instructions
from tether.redteam.scenarios import default_scenarios, naive_scenarios, refund_approver
from tether.redteam.services import Effect, EffectLog, FakeShell, FileStore, Mailbox, RefundDesk

__all__ = [
    "AttemptOutcome",
    "Effect",
    "EffectLog",
    "FakeShell",
    "FileStore",
    "Instruction",
    "Mailbox",
    "ObedientModel",
    "RedTeamReport",
    "RefundDesk",
    "Scenario",
    "ScenarioReport",
    "Setup",
    "default_scenarios",
    "extract_instructions",
    "naive_scenarios",
    "refund_approver",
    "run_redteam",
    "run_scenario",
    "run_scenarios",
]
