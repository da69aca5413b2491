"""A tool's description is its docstring's text, paragraphs as written."""

from __future__ import annotations

from tether.tools import tool


def test_a_summary_that_wraps_is_one_paragraph() -> None:
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund part or all of an order to the card it was paid with, up to what
        is left to refund
        on that order.

        Use it only after checking the order with lookup. It does not cancel
        the order and cannot be undone.

        It never refunds more than was paid.

        Args:
            order_id: The order's id, such as C-1042.
            amount: The amount in euros.
        """
        return order_id

    assert refund.spec.description == (
        "Refund part or all of an order to the card it was paid with, up to what is left"
        " to refund on that order.\n\n"
        "Use it only after checking the order with lookup. It does not cancel\n"
        "the order and cannot be undone.\n\n"
        "It never refunds more than was paid."
    )
    assert refund.spec.parameters["properties"]["amount"]["description"] == "The amount in euros."


def test_paragraph_breaks_and_one_line_docstrings_stay_as_written() -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Look up an order.

        Use it to read an order. It changes nothing.
        """
        return order_id

    @tool
    def ping() -> str:
        """Answer pong. Use it to test. It does nothing else."""
        return "pong"

    @tool
    def wrapped_only(q: str) -> str:
        """Search the help articles for a phrase and return the titles
        of the best ten matches."""
        return q

    assert (
        lookup.spec.description
        == "Look up an order.\n\nUse it to read an order. It changes nothing."
    )
    assert ping.spec.description == "Answer pong. Use it to test. It does nothing else."
    assert wrapped_only.spec.description == (
        "Search the help articles for a phrase and return the titles of the best ten matches."
    )
