"""Red-team harness: test an agent's setup against a model that obeys every injection.

``run_redteam()`` runs the built-in hardened scenarios and returns a report of attempted
versus achieved unauthorized effects; build your own :class:`Scenario` to test your agent.
``run_suite()`` runs the injection suite (four domains, a benign task and an injection per
case) under the default call policy and the old taint layer, and counts every injected
side effect.
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
from tether.redteam.hijacked import HijackedModel
from tether.redteam.obedient import Instruction, ObedientModel, extract_instructions
from tether.redteam.scenarios import default_scenarios, naive_scenarios, refund_approver
from tether.redteam.services import Effect, EffectLog, FakeShell, FileStore, Mailbox, RefundDesk
from tether.redteam.suite import CaseRun, SuiteReport, run_case, run_suite
from tether.redteam.world import Action, Case, Domain, World

__all__ = [
    "Action",
    "AttemptOutcome",
    "Case",
    "CaseRun",
    "Domain",
    "Effect",
    "EffectLog",
    "FakeShell",
    "FileStore",
    "HijackedModel",
    "Instruction",
    "Mailbox",
    "ObedientModel",
    "RedTeamReport",
    "RefundDesk",
    "Scenario",
    "ScenarioReport",
    "Setup",
    "SuiteReport",
    "World",
    "default_scenarios",
    "extract_instructions",
    "naive_scenarios",
    "refund_approver",
    "run_case",
    "run_redteam",
    "run_scenario",
    "run_scenarios",
    "run_suite",
]
