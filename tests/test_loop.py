"""The loop's rules, one test each; each fails if its rule is removed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated

import pytest

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.errors import InvalidHistoryError, RunNotCompleted
from tether.history import check
from tether.limits import Limits, Pricing
from tether.loop import Agent
from tether.messages import Message, StopReason, ToolCall, Usage
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import FunctionTool, RunContext, ToolSpec, tool

ORDER = ("lire_commande", {"numero": "C-1042"})


def agent(script: object, tools: list[FunctionTool], **limits: object) -> Agent[None]:
    client = (
        script
        if isinstance(script, BaseChatClient | FaultyClient)
        else ScriptedClient(
            script  # type: ignore[arg-type]
        )
    )
    return Agent(client, tools, limits=Limits(**limits))  # type: ignore[arg-type]


def assert_valid(transcript: Sequence[Message]) -> None:
    assert check(transcript) == [], check(transcript)


async def test_seed_conversation_completes(tools: list[FunctionTool]) -> None:
    client = ScriptedClient([call_reply(ORDER, text="Je consulte."), "Elle est expediee."])
    result = await Agent(client, tools).run("Ou en est ma commande C-1042 ?")
    assert result.outcome.kind == "completed"
    assert result.output == "Elle est expediee."
    assert [m.role for m in result.transcript] == ["user", "assistant", "tool", "assistant"]
    res = result.transcript[2].tool_results[0]
    assert res.call_id == result.transcript[1].tool_calls[0].id
    assert '"statut":"expediee"' in res.content and not res.is_error
    assert result.usage.requests == 2 and result.usage.input_tokens > 0
    # the second request resent the whole history
    assert len(client.requests[1].messages) == 3
    assert_valid(result.transcript)


async def test_missing_stop_reason_does_not_end_the_loop(tools: list[FunctionTool]) -> None:
    inner = ScriptedClient([call_reply(ORDER), "done"])
    result = await agent(FaultyClient(inner, {1: "missing_stop"}), tools).run("q")
    assert result.outcome.kind == "completed"
    assert result.transcript[2].role == "tool"  # the call was executed


async def test_decides_on_content_not_on_stop_reason(tools: list[FunctionTool]) -> None:
    # says tool_use but asks for nothing: that is a final answer
    result = await agent([text_reply("all done", stop="tool_use")], tools).run("q")
    assert result.outcome.kind == "completed" and result.output == "all done"
    # says end_turn but asks for a call: the call runs
    result = await agent([call_reply(ORDER, stop="end_turn"), "ok"], tools).run("q")
    assert result.transcript[2].role == "tool" and result.outcome.kind == "completed"


async def test_truncated_text_is_not_an_answer(tools: list[FunctionTool]) -> None:
    result = await agent(
        FaultyClient(ScriptedClient(["A long answer"]), {1: "truncated_text"}), tools
    ).run("q")
    assert result.outcome.kind == "truncated"
    with pytest.raises(RunNotCompleted, match="truncated"):
        _ = result.output


async def test_truncated_tool_call_is_never_executed(tools: list[FunctionTool]) -> None:
    ran: list[str] = []

    @tool(name="lire_commande", thread=False)
    def spy(numero: Annotated[str, "N."]) -> str:
        """Spy."""
        ran.append(numero)
        return "x"

    inner = ScriptedClient([call_reply(ORDER)])
    result = await agent(FaultyClient(inner, {1: "truncated_call"}), [spy]).run("q")
    assert result.outcome.kind == "truncated"
    assert ran == []
    assert result.transcript[-1].tool_results[0].is_error
    assert_valid(result.transcript)
    # even a well-formed call in a truncated reply is not run
    result = await agent([call_reply(ORDER, stop="max_tokens")], [spy]).run("q")
    assert result.outcome.kind == "truncated" and ran == []


async def test_pause_turn_is_continued(tools: list[FunctionTool]) -> None:
    inner = ScriptedClient([call_reply(ORDER), "done"])
    faulty = FaultyClient(inner, {1: "pause_turn"})
    result = await agent(faulty, tools).run("q")
    assert result.outcome.kind == "completed"
    assert result.turns == 3
    # the request after the pause ends with the paused assistant message
    assert inner.requests[0].messages[-1].text == "Searching..."


@pytest.mark.parametrize("fault", ["refusal", "content_filter"])
async def test_refusal_is_a_typed_outcome(tools: list[FunctionTool], fault: str) -> None:
    result = await agent(FaultyClient(ScriptedClient([]), {1: fault}), tools).run("q")  # type: ignore[dict-item]
    assert result.outcome.kind == "refused"


@pytest.mark.parametrize("fault", ["context_exceeded", "context_stop"])
async def test_context_exceeded_is_a_typed_outcome(tools: list[FunctionTool], fault: str) -> None:
    result = await agent(FaultyClient(ScriptedClient([]), {1: fault}), tools).run("q")  # type: ignore[dict-item]
    assert result.outcome.kind == "context_exceeded"
    assert_valid(result.transcript)


async def test_unknown_tool_becomes_an_error_result(tools: list[FunctionTool]) -> None:
    result = await agent([call_reply(("nope", {})), "sorry"], tools).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.is_error and "Unknown tool 'nope'" in res.content and "lire_commande" in res.content
    assert result.outcome.kind == "completed"


async def test_invalid_and_malformed_arguments_become_error_results(
    tools: list[FunctionTool],
) -> None:
    result = await agent([call_reply(("lire_commande", {"numero": "42"})), "ok"], tools).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.is_error and "numero" in res.content and "pattern" in res.content
    inner = ScriptedClient([call_reply(ORDER), "ok"])
    result = await agent(FaultyClient(inner, {1: "malformed_arguments"}), tools).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.is_error and "not a valid JSON object" in res.content


async def test_tool_exceptions_are_generic_unless_detailed(tools: list[FunctionTool]) -> None:
    script = [call_reply(("explode", {"reason": "r"})), "ok"]
    result = await agent(script, tools).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.is_error and res.content == "Tool 'explode' failed."
    assert "secret" not in res.content
    result = await agent(list(script), tools, detailed_errors=True).run("q")
    assert "RuntimeError: secret path" in result.transcript[2].tool_results[0].content


async def test_consecutive_failing_turns_end_the_run(tools: list[FunctionTool]) -> None:
    bad = call_reply(("explode", {"reason": "r"}))
    result = await agent([bad, bad, bad, "never"], tools).run("q")
    assert result.outcome.kind == "failed"
    assert result.outcome.limit == "max_consecutive_errors"
    assert result.turns == 3
    # a success in between resets the count
    good = call_reply(ORDER)
    result = await agent([bad, bad, good, bad, bad, "fine"], tools).run("q")
    assert result.outcome.kind == "completed"


async def test_turn_cap_is_explicit_not_a_forced_answer(tools: list[FunctionTool]) -> None:
    client = ScriptedClient(lambda _: call_reply(ORDER))
    result = await Agent(client, tools, limits=Limits(max_turns=4)).run("q")
    assert result.outcome.kind == "turn_cap" and result.outcome.limit == "max_turns"
    assert len(client.requests) == 4
    assert all(r.tools for r in client.requests)  # no tool-less forced request
    assert result.transcript[-1].role == "tool"
    assert_valid(result.transcript)
    with pytest.raises(RunNotCompleted):
        _ = result.output


async def test_token_and_cost_budgets(tools: list[FunctionTool]) -> None:
    big = Usage(input_tokens=600, output_tokens=50, requests=1)
    script = lambda _: call_reply(ORDER, usage=big)  # noqa: E731
    result = await agent(script, tools, max_total_tokens=1000).run("q")
    assert (result.outcome.kind, result.outcome.limit) == ("budget_exceeded", "max_total_tokens")
    assert result.turns == 2
    result = await agent(script, tools, max_input_tokens=1200).run("q")
    assert result.outcome.limit == "max_input_tokens"
    result = await agent(script, tools, max_output_tokens=100).run("q")
    assert result.outcome.limit == "max_output_tokens"
    price = Pricing(input=1000.0, output=0.0)  # 0.6 per request
    result = await agent(script, tools, max_cost=1.0, pricing=price).run("q")
    assert (result.outcome.limit, result.turns) == ("max_cost", 2)


async def test_wall_time_budget_stops_tools_and_keeps_history(tools: list[FunctionTool]) -> None:
    result = await agent([call_reply(("slow", {"seconds": 30}))], tools, max_wall_seconds=0.2).run(
        "q"
    )
    assert (result.outcome.kind, result.outcome.limit) == ("budget_exceeded", "max_wall_seconds")
    assert result.transcript[-1].tool_results[0].is_error
    assert_valid(result.transcript)


async def test_tool_timeout(tools: list[FunctionTool]) -> None:
    result = await agent(
        [call_reply(("slow", {"seconds": 30})), "ok"], tools, tool_timeout_seconds=0.05
    ).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.is_error and "did not finish within 0.05 seconds" in res.content


async def test_calls_run_concurrently_within_the_limit() -> None:
    in_flight = 0
    peak = 0

    @tool
    async def work(n: Annotated[int, "N."]) -> str:
        """Work."""
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return str(n)

    script = [call_reply(*[("work", {"n": i}) for i in range(6)]), "done"]
    result = await agent(script, [work], max_concurrency=2).run("q")
    assert peak == 2
    assert [r.content for r in result.transcript[2].tool_results] == [str(i) for i in range(6)]
    peak = 0
    await agent(list(script), [work], max_concurrency=8).run("q")
    assert peak == 6


async def test_siblings_are_isolated_and_every_call_gets_one_result(
    tools: list[FunctionTool],
) -> None:
    script = [
        call_reply(ORDER, ("explode", {"reason": "x"}), ("nope", {}), ("lire_commande", {})),
        "ok",
    ]
    result = await agent(script, tools).run("q")
    calls = result.transcript[1].tool_calls
    results = result.transcript[2].tool_results
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert [r.is_error for r in results] == [False, True, True, True]
    assert_valid(result.transcript)


async def test_duplicate_call_ids_are_made_unique(tools: list[FunctionTool]) -> None:
    inner = ScriptedClient([call_reply(ORDER, ("lire_commande", {"numero": "C-2210"})), "ok"])
    result = await agent(FaultyClient(inner, {1: "duplicate_ids"}), tools).run("q")
    ids = [c.id for c in result.transcript[1].tool_calls]
    assert len(set(ids)) == 2
    assert_valid(result.transcript)
    assert result.outcome.kind == "completed"


async def test_cancellation_stops_tools_and_keeps_a_valid_transcript(
    tools: list[FunctionTool],
) -> None:
    finished: list[bool] = []

    @tool
    async def hang(s: Annotated[float, "S."]) -> str:
        """Hang."""
        await asyncio.sleep(s)
        finished.append(True)
        return "late"

    handle = agent([call_reply(("hang", {"s": 30}))], [hang]).start("q")
    await asyncio.sleep(0.05)
    handle.cancel()
    result = await handle
    assert result.outcome.kind == "cancelled"
    assert finished == []
    (res,) = result.transcript[-1].tool_results
    assert res.status == "interrupted" and "cancelled" in res.content
    assert_valid(result.transcript)


async def test_history_is_validated_before_every_request(tools: list[FunctionTool]) -> None:
    client = ScriptedClient(["never"])
    bad = [Message.user("q"), Message("assistant", (ToolCall("x", "lire_commande", {}),))]
    with pytest.raises(InvalidHistoryError, match="orphan call"):
        await Agent(client, tools).run(bad)
    assert client.requests == []


async def test_validator_runs_on_every_request(tools: list[FunctionTool]) -> None:
    class Evil(BaseChatClient):
        """Returns a reply, then corrupts the loop's history behind its back."""

        def __init__(self) -> None:
            self.n = 0

        async def complete(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
        ) -> ChatResponse:
            self.n += 1
            if self.n == 2:
                assert isinstance(messages, list)
                messages.append(Message.results([]))  # a stray tool message
            return call_reply(ORDER) if self.n < 3 else text_reply("x")

    with pytest.raises(InvalidHistoryError):
        await Agent(Evil(), tools).run("q")


async def test_provider_errors_become_failed_outcomes(tools: list[FunctionTool]) -> None:
    for fault, kind in [
        ("rate_limit", "rate_limit"),
        ("overloaded", "overloaded"),
        ("server_error", "server"),
        ("timeout", "timeout"),
    ]:
        inner = ScriptedClient([call_reply(ORDER), "never"])
        result = await agent(FaultyClient(inner, {2: fault}), tools).run("q")  # type: ignore[dict-item]
        assert (result.outcome.kind, result.outcome.error) == ("failed", kind)
        assert len(result.transcript) == 3  # the first turn's work is kept
        assert_valid(result.transcript)


async def test_script_exhausted_and_client_bugs_fail_clearly(tools: list[FunctionTool]) -> None:
    result = await agent([], tools).run("q")
    assert result.outcome.kind == "failed" and "no reply left" in result.outcome.reason

    class Broken(BaseChatClient):
        async def complete(self, *a: object) -> ChatResponse:  # type: ignore[override]
            raise KeyError("boom")

    result = await Agent(Broken(), tools).run("q")
    assert result.outcome.error == "client" and "KeyError" in result.outcome.reason


async def test_empty_reply_fails(tools: list[FunctionTool]) -> None:
    empty = ChatResponse((Message("assistant", ()),), StopReason.parse("end_turn"))
    result = await agent([empty], tools).run("q")
    assert (result.outcome.kind, result.outcome.error) == ("failed", "empty_reply")
    assert_valid(result.transcript)


async def test_result_size_cap(tools: list[FunctionTool]) -> None:
    @tool(thread=False)
    def flood() -> str:
        """Flood."""
        return "x" * 10_000

    result = await agent([call_reply(("flood", {})), "ok"], [flood], max_result_chars=100).run("q")
    content = result.transcript[2].tool_results[0].content
    assert content.startswith("x" * 100)
    assert content.endswith(
        "[9900 characters omitted: ask for less (a filter, a page) to see the rest]"
    )


async def test_results_are_capped_by_default() -> None:
    @tool(thread=False)
    def huge() -> str:
        """Huge."""
        return "y" * 200_000

    result = await Agent(ScriptedClient([call_reply(("huge", {})), "ok"]), [huge]).run("q")
    content = result.transcript[2].tool_results[0].content
    assert len(content) < 50_100
    assert "[150000 characters omitted" in content


async def test_usage_reported_by_tools_rolls_up() -> None:
    @tool
    async def costly(ctx: RunContext[None]) -> str:
        """Costly."""
        ctx.report_usage(Usage(input_tokens=1000, requests=1))
        return "ok"

    result = await agent([call_reply(("costly", {})), "done"], [costly]).run("q")
    assert result.usage.input_tokens >= 1000 and result.usage.requests == 3


async def test_run_sync_and_deps() -> None:
    @tool(thread=False)
    def whoami(ctx: RunContext[str]) -> str:
        """Who am I."""
        return ctx.deps

    a = Agent(ScriptedClient([call_reply(("whoami", {})), "ok"]), [whoami], deps="alice")
    result = await a.run("q")
    assert result.transcript[2].tool_results[0].content == "alice"


def test_run_sync() -> None:
    assert Agent(ScriptedClient(["hello"]), []).run_sync("q").output == "hello"


def test_duplicate_tool_names_are_refused(tools: list[FunctionTool]) -> None:
    with pytest.raises(ValueError, match="two tools"):
        Agent(ScriptedClient([]), [tools[0], tools[0]])
