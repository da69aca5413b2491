"""Workflows in plain Python: the triage worked example of docs/workflows.md, run as written,
then the bounds, the typed outcomes and the spans."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tether.errors import StructuredOutputError, ToolFailure, WorkflowNotCompleted
from tether.limits import Limits
from tether.messages import Usage
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, json_reply, text_reply
from tether.tools import tool
from tether.workflows import Workflow, run_workflow

DOC = Path(__file__).parents[1] / "docs" / "workflows.md"


def doc_blocks() -> list[str]:
    return re.findall(r"```python[^\n]*\n(.*?)```", DOC.read_text(), re.DOTALL)


def worked_example() -> dict[str, Any]:
    """The triage code of the docs, executed as written."""
    (code,) = [b for b in doc_blocks() if "async def traiter" in b]
    module = types.ModuleType("triage_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module.__dict__


EX = worked_example()
LIMITS = Limits(max_turns=2, max_wall_seconds=30)


def ticket(text: str = "Ou en est mon colis ? (commande C-2210)") -> Any:
    return EX["Ticket"]("C-1042", text)


async def triage(client: Any, text: str = "x", limits: Limits = LIMITS) -> Any:
    return await run_workflow(client, partial(EX["traiter"], ticket=ticket(text)), limits=limits)


async def test_the_docs_run_example_holds() -> None:
    (code,) = [b for b in doc_blocks() if "run_workflow(" in b and "ScriptedClient" in b]
    namespace = {**EX}
    body = "async def _main():\n" + "".join(f"    {line}\n" for line in code.splitlines())
    exec(compile(body, str(DOC), "exec"), namespace)
    await namespace["_main"]()


async def test_suivi_reads_the_accounts_order_in_one_call() -> None:
    client = ScriptedClient([json_reply({"motif": "Suivi"})])
    result = await triage(client, "Ou est mon colis ? Commande C-2210.")
    assert result.outcome.kind == "completed"
    assert result.output == "Votre commande C-1042 est expediee."  # not C-2210 from the text
    assert result.calls == 1 and len(client.requests) == 1
    request = client.requests[0]
    assert request.tools == () and request.options.output_schema is not None
    assert request.options.output_schema.name == "Tri"
    assert request.options.instructions == "Classe le ticket : Suivi, Remboursement ou Autre."
    assert [(s.name, s.kind, s.error) for s in result.steps] == [
        ("Tri", "extract", None),
        ("lire_commande", "tool", None),
    ]
    assert result.steps[0].usage.requests == 1 and result.usage == result.steps[0].usage


@pytest.mark.parametrize(
    ("motif", "answer"),
    [
        ("Remboursement", "Transmis au service remboursements."),
        ("Autre", "Transmis a un conseiller."),
    ],
)
async def test_other_motifs_take_their_path_without_tools(motif: str, answer: str) -> None:
    result = await triage(ScriptedClient([json_reply({"motif": motif})]))
    assert result.output == answer
    assert [s.kind for s in result.steps] == ["extract"]


async def test_a_ticket_that_resists_classification_goes_to_a_human() -> None:
    client = ScriptedClient(["Suivi probablement", json_reply({"motif": "Urgent"})])
    result = await triage(client)
    assert result.output == "Transmis a un conseiller."
    assert result.calls == 2  # the answer and the one re-ask
    assert result.steps[0].error == "invalid"


async def test_a_refusal_also_goes_to_a_human() -> None:
    client = FaultyClient(ScriptedClient([json_reply({"motif": "Suivi"})]), {1: "refusal"})
    result = await triage(client)
    assert result.output == "Transmis a un conseiller." and result.steps[0].error == "refused"


# --- one limits object for the whole ----------------------------------------------------------


async def test_the_reask_counts_against_max_turns() -> None:
    client = ScriptedClient(["not json", json_reply({"motif": "Suivi"})])
    result = await triage(client, limits=Limits(max_turns=1))
    assert result.outcome.kind == "turn_cap" and result.outcome.limit == "max_turns"
    assert len(client.requests) == 1 and result.calls == 1
    with pytest.raises(WorkflowNotCompleted, match="turn_cap"):
        _ = result.output


async def test_tokens_are_bounded_across_steps() -> None:
    async def two_calls(wf: Workflow) -> str:
        await wf.extract("one", str)
        await wf.extract("two", str)
        return "done"

    replies = [json_reply({"value": "a"}, usage=Usage(60, 10, requests=1))] * 2
    client = ScriptedClient(replies)
    result = await run_workflow(client, two_calls, limits=Limits(max_total_tokens=50))
    assert result.outcome.kind == "budget_exceeded"
    assert result.outcome.limit == "max_total_tokens"
    assert len(client.requests) == 1 and result.usage.total_tokens == 70


async def test_wall_time_bounds_tool_steps_too() -> None:
    async def stuck(wf: Workflow) -> str:
        await wf.call(asyncio.sleep, delay=30)
        return "never"

    result = await run_workflow(ScriptedClient([]), stuck, limits=Limits(max_wall_seconds=0.05))
    assert result.outcome.kind == "budget_exceeded" and result.outcome.limit == "max_wall_seconds"
    assert result.steps[0].error == "cancelled"


async def test_a_caught_limit_still_ends_the_workflow_at_the_bound() -> None:
    async def stubborn(wf: Workflow) -> str:
        try:
            await wf.extract("one", str)
            await wf.extract("two", str)
        except Exception:
            return "looks normal"
        return "done"

    client = ScriptedClient([json_reply({"value": "a"})] * 2)
    result = await run_workflow(client, stubborn, limits=Limits(max_turns=1))
    assert result.outcome.kind == "turn_cap" and result.value is None


async def test_a_step_after_a_caught_limit_is_refused() -> None:
    seen: list[str] = []

    async def pushes_on(wf: Workflow) -> str:
        await wf.extract("one", str)
        with pytest.raises(Exception, match="1 model requests made"):
            await wf.extract("two", str)
        with pytest.raises(Exception, match="1 model requests made"):
            await wf.call(seen.append, object="ran")
        return "x"

    client = ScriptedClient([json_reply({"value": "a"})])
    result = await run_workflow(client, pushes_on, limits=Limits(max_turns=1))
    assert result.outcome.kind == "turn_cap" and seen == [] and len(client.requests) == 1


# --- typed outcomes ---------------------------------------------------------------------------


async def extract_only(wf: Workflow) -> Any:
    return await wf.extract("ticket", EX["Tri"])


@pytest.mark.parametrize(
    ("fault", "kind", "error"),
    [
        ("refusal", "refused", None),
        ("truncated_text", "truncated", None),
        ("context_exceeded", "context_exceeded", None),
        ("rate_limit", "failed", "rate_limit"),
    ],
)
async def test_uncaught_step_failures_become_outcomes(
    fault: str, kind: str, error: str | None
) -> None:
    client = FaultyClient(ScriptedClient([json_reply({"motif": "Suivi"})]), {1: fault})  # type: ignore[dict-item]
    result = await run_workflow(client, extract_only)
    assert (result.outcome.kind, result.outcome.error) == (kind, error)


async def test_invalid_output_is_a_failed_outcome() -> None:
    result = await run_workflow(ScriptedClient(["{", "}"]), extract_only)
    assert (result.outcome.kind, result.outcome.error) == ("failed", "invalid_output")
    assert result.calls == 2


async def test_a_tool_failure_is_a_failed_outcome_and_a_bug_propagates() -> None:
    @tool(thread=False)
    def refuse(order: str) -> str:
        """Refuse. Used to test failures. Does nothing else."""
        raise ToolFailure(f"order {order} is locked")

    async def uses_tool(wf: Workflow) -> str:
        return str(await wf.call(refuse, order="C-1"))

    result = await run_workflow(ScriptedClient([]), uses_tool)
    assert (result.outcome.kind, result.outcome.error) == ("failed", "ToolFailure")
    assert "locked" in result.outcome.reason

    async def invalid_arguments(wf: Workflow) -> str:
        return str(await wf.call(refuse, order=3))

    result = await run_workflow(ScriptedClient([]), invalid_arguments)
    assert result.outcome.error == "InvalidArguments"

    async def buggy(wf: Workflow) -> str:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await run_workflow(ScriptedClient([]), buggy)


async def test_plain_functions_and_function_tools_return_python_values() -> None:
    async def adder(a: int, b: int) -> int:
        return a + b

    def multiply(a: int, b: int) -> int:
        return a * b

    def greet(name: str) -> str:
        return f"bonjour {name}"

    async def body(wf: Workflow) -> tuple[Any, ...]:
        order = await wf.call(EX["read_order"], numero="C-2210")
        total = await wf.call(adder, a=1, b=2)
        product = await wf.call(multiply, a=2, b=3)
        return order, total, product, await wf.call(greet, name="Ana", step_name="salut")

    result = await run_workflow(ScriptedClient([]), body)
    order, total, product, greeting = result.output
    assert order.statut == "livree" and (total, product) == (3, 6)
    assert greeting == "bonjour Ana"  # an argument called "name" reaches the function
    assert [s.name for s in result.steps] == ["lire_commande", "adder", "multiply", "salut"]


async def test_cancellation_propagates() -> None:
    started = asyncio.Event()

    async def slow(wf: Workflow) -> None:
        started.set()
        await wf.call(asyncio.sleep, delay=30)

    task = asyncio.create_task(run_workflow(ScriptedClient([]), slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- spans ------------------------------------------------------------------------------------


async def test_each_step_is_a_span_under_the_workflow_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = ScriptedClient(["{", json_reply({"motif": "Suivi"})])
    result = await run_workflow(
        client,
        partial(EX["traiter"], ticket=ticket()),
        name="triage",
        tracer_provider=provider,
    )
    assert result.output.startswith("Votre commande")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    expected = {"invoke_workflow triage", "extract Tri", "chat", "execute_tool lire_commande"}
    assert set(spans) == expected
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat"]
    assert len(chats) == 2  # the answer and the re-ask
    root = spans["invoke_workflow triage"]
    extract_span, tool_span = spans["extract Tri"], spans["execute_tool lire_commande"]
    assert root.parent is None
    assert extract_span.parent.span_id == root.context.span_id  # type: ignore[union-attr]
    assert tool_span.parent.span_id == root.context.span_id  # type: ignore[union-attr]
    assert all(c.parent.span_id == extract_span.context.span_id for c in chats)  # type: ignore[union-attr]
    assert all(c.kind is SpanKind.CLIENT for c in chats)
    assert all(dict(c.attributes or {})["gen_ai.output.type"] == "json" for c in chats)
    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_workflow"
    assert attrs["gen_ai.workflow.name"] == "triage"
    assert "gen_ai.agent.name" not in attrs
    assert attrs["gen_ai.conversation.id"] == result.run_id
    assert attrs["tether.outcome"] == "completed"
    assert attrs["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0
    tool_attrs = dict(tool_span.attributes or {})
    assert tool_attrs["gen_ai.tool.name"] == "lire_commande"
    assert tool_attrs["gen_ai.tool.call.id"] == "step_2"
    assert tool_attrs["tether.step.kind"] == "tool"
    assert "gen_ai.tool.call.arguments" not in tool_attrs  # content is opt-in
    assert dict(extract_span.attributes or {})["gen_ai.usage.input_tokens"] > 0


async def test_a_workflow_that_did_not_complete_is_an_error_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = FaultyClient(ScriptedClient([text_reply("x")]), {1: "rate_limit"})
    result = await run_workflow(client, extract_only, tracer_provider=provider)
    assert result.outcome.kind == "failed"
    root = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_workflow"))
    assert root.status.status_code is StatusCode.ERROR
    assert dict(root.attributes or {})["error.type"] == "failed"
    step = next(s for s in exporter.get_finished_spans() if s.name.startswith("extract"))
    assert dict(step.attributes or {})["error.type"] == "rate_limit"


async def test_structured_output_error_is_catchable_inside() -> None:
    async def body(wf: Workflow) -> str:
        try:
            await wf.extract("x", EX["Tri"])
        except StructuredOutputError as exc:
            return exc.kind
        return "ok"

    result = await run_workflow(ScriptedClient(["a", "b"]), body)
    assert result.output == "invalid"
