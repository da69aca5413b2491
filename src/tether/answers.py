"""Typed final answers: an agent's final text validated into its ``output_type``.

The loop calls :meth:`FinalAnswers.read` where a run would complete (a reply without tool
calls). A valid answer completes the run with the object as ``result.output``; an invalid
one is re-asked (a user message listing the problems, so the run's bounds count it like any
turn) up to ``reasks`` times, then the run ends ``failed`` with ``error="invalid_output"``.
The provider is asked for the schema natively on every request
(``ChatOptions.output_schema``), tools included, so the final text is usually valid at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.messages import Message
from tether.outcomes import Outcome
from tether.structured import InvalidOutput, OutputType, reask_text

INVALID_OUTPUT = "invalid_output"
"""``Outcome.error`` of a run whose final answer stayed invalid."""

REASKS_KEY = "tether.answer_reasks"
"""Key of the run's memo counting the re-asks made so far: the memo is saved in the run's
state, so an approval round in between does not give the model another re-ask."""


@dataclass(frozen=True, slots=True)
class Valid:
    """The final answer, validated."""

    value: Any


@dataclass(frozen=True, slots=True)
class Reask:
    """Ask again: ``message`` goes into the history and the run goes on."""

    message: Message


@dataclass(frozen=True, slots=True)
class Invalid:
    """No valid answer after the re-asks: the run ends with ``outcome``."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class FinalAnswers:
    """The output type of an agent and how many times an invalid answer is re-asked."""

    output: OutputType[Any]
    reasks: int = 1

    @classmethod
    def of(cls, output_type: Any, reasks: int = 1) -> FinalAnswers:
        """For ``output_type`` (a type, or an :class:`~tether.structured.OutputType`)."""
        if reasks < 0:
            raise ValueError("reasks must be 0 or more")
        out = output_type if isinstance(output_type, OutputType) else OutputType.of(output_type)
        return cls(out, reasks)

    def read(self, message: Message, reasked: int) -> Valid | Reask | Invalid:
        """Judge a final answer; ``reasked`` is how many re-asks this run already made."""
        try:
            return Valid(self.output.parse(message.text))
        except InvalidOutput as bad:
            if reasked >= self.reasks:
                return Invalid(
                    Outcome(
                        "failed",
                        f"the final answer is not a valid {self.output.schema.name} after "
                        f"{reasked} re-ask(s): {bad}",
                        error=INVALID_OUTPUT,
                    )
                )
            return Reask(Message.user(reask_text(bad.problems)))
