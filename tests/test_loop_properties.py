"""Random scripted runs with random faults: the loop always ends within its caps with a
typed outcome, and no request ever carries a history that breaks the rules."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.clients import ChatOptions, ChatResponse, DelegatingChatClient
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, Usage
from tether.outcomes import OutcomeKind
from tether.providers.faults import FAULTS, FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import FunctionTool, ToolSpec

TYPED = set(get_args(OutcomeKind))

call_specs = st.one_of(
    st.just(("lire_commande", {"numero": "C-1042"})),
    st.just(("lire_commande", {"numero": "bad"})),
    st.just(("lire_commande", {})),
    st.just(("explode", {"reason": "r"})),
    st.just(("slow", {"seconds": 0})),
    st.just(("ghost", {"x": 1})),
)
replies = st.one_of(
    st.builds(lambda t: text_reply(t), st.text(min_size=1, max_size=5)),
    st.builds(
        lambda calls, u: call_reply(*calls, usage=Usage(u, u // 4, requests=1)),
        st.lists(call_specs, min_size=1, max_size=4),
        st.integers(0, 400),
    ),
)


class Validating(DelegatingChatClient):
    """Checks every history it is sent."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.violations: list[Any] = []
        self.requests = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        self.requests += 1
        self.violations.extend(check(messages))
        return await self.inner.complete(messages, tools, options)


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    script=st.lists(replies, min_size=0, max_size=12),
    faults=st.dictionaries(st.integers(1, 12), st.sampled_from(FAULTS), max_size=4),
    max_turns=st.integers(1, 10),
    max_errors=st.integers(1, 4),
    max_tokens=st.one_of(st.none(), st.integers(50, 3000)),
)
def test_random_runs_end_typed_within_caps_with_valid_histories(
    tools: list[FunctionTool],
    script: list[ChatResponse],
    faults: dict[int, Any],
    max_turns: int,
    max_errors: int,
    max_tokens: int | None,
) -> None:
    client = Validating(FaultyClient(ScriptedClient(script), faults))
    limits = Limits(
        max_turns=max_turns, max_consecutive_errors=max_errors, max_total_tokens=max_tokens
    )
    result = asyncio.run(Agent(client, tools, limits=limits).run("q"))
    assert result.outcome.kind in TYPED
    assert result.turns <= max_turns
    assert client.requests == result.turns
    assert client.violations == []
    assert check(result.transcript) == []
    if result.outcome.kind == "completed":
        assert result.transcript[-1].role == "assistant"
        assert not result.transcript[-1].tool_calls
