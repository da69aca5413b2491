"""Bounded tool output: a page says what it left out and how to get the rest."""

from __future__ import annotations

from typing import Annotated

from tether.context.paging import DEFAULT_CAP_HINT, CappedTool, cap_tools, page
from tether.invoke import cap_text
from tether.tools import RunContext, tool


def test_page_keeps_limit_items_and_says_how_to_get_the_rest() -> None:
    p = page((f"line {i}" for i in range(362)), since=0, limit=50, unit="matches")
    assert p.items == tuple(f"line {i}" for i in range(50))
    assert p.total == 362
    assert p.notice() == "[312 more matches: since=50]"
    assert p.render().endswith("line 49\n[312 more matches: since=50]")


def test_next_page_and_last_page() -> None:
    items = [str(i) for i in range(120)]
    second = page(items, since=50, limit=50, unit="matches")
    assert second.items[0] == "50" and second.notice() == "[20 more matches: since=100]"
    last = page(items, since=100, limit=50, unit="matches")
    assert len(last.items) == 20 and last.notice() == "" and last.next_since is None
    assert "more" not in last.render()


def test_since_past_the_end_says_how_many_there_are() -> None:
    text = page(["a", "b"], since=10, limit=5, unit="matches").render()
    assert "there are 2" in text and "since=0" in text


def test_empty_result_uses_the_given_text() -> None:
    assert page([], limit=5).render(empty="nothing") == "nothing"


def test_page_reads_a_huge_iterable_without_holding_it() -> None:
    consumed = 0

    def numbers() -> object:
        nonlocal consumed
        for i in range(200_000):
            consumed += 1
            yield str(i)

    p = page(numbers(), since=100, limit=3)  # type: ignore[arg-type]
    assert p.items == ("100", "101", "102") and p.total == 200_000 and consumed == 200_000


def test_core_cap_text_keeps_its_plain_notice_and_takes_a_hint() -> None:
    assert cap_text("x" * 10, 4) == "xxxx\n[6 characters omitted]"
    assert cap_text("x" * 10, 4, "ask for less") == "xxxx\n[6 characters omitted: ask for less]"
    assert cap_text("short", 10, "hint") == "short"


@tool(thread=False)
def dump(size: Annotated[int, "How many characters to return."]) -> str:
    """Returns a long text. Used to test output caps. Does nothing else."""
    return "y" * size


async def test_capped_tool_cuts_long_results_with_a_notice() -> None:
    capped = CappedTool(dump, max_chars=1000)
    ctx = RunContext(None)
    long = await capped.invoke({"size": 10_000}, ctx)
    assert long.startswith("y" * 1000)
    assert long.endswith(f"[9000 characters omitted: {DEFAULT_CAP_HINT}]")
    assert await capped.invoke({"size": 10}, ctx) == "y" * 10
    assert capped.spec == dump.spec and capped.name == "dump"


def test_cap_tools_wraps_each_tool() -> None:
    wrapped = cap_tools([dump], max_chars=10)
    assert isinstance(wrapped[0], CappedTool) and wrapped[0].max_chars == 10
