"""The tether program of docs/comparison.md runs as the page says: the honest run pays
89.90 once; an edited approval state, naive or with its hash recomputed, pays nothing."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).parents[1] / "examples" / "comparison" / "tether_refund.py"


async def test_the_tether_refund_agent_refuses_an_edited_state() -> None:
    program: dict[str, Any] = runpy.run_path(str(PROGRAM))
    main, paid = program["main"], program["PAID"]
    honest = await main()
    assert "completed" in honest and paid == [89.9]
    naive = await main("naive")
    assert "refused" in naive and paid == []
    consistent = await main("consistent")
    assert "seal does not match" in consistent and paid == []
