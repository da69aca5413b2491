"""Context as a resource: bounded tool output, clearing, compaction, sub-agents, accounting.

Importing this package loads nothing; each name comes from its small module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "Page": "tether.context.paging",
    "page": "tether.context.paging",
    "CappedTool": "tether.context.paging",
    "cap_tools": "tether.context.paging",
    "LogSearchTool": "tether.context.log_search",
    "log_search_tool": "tether.context.log_search",
    "ClearOldResults": "tether.context.clearing",
    "CompactHistory": "tether.context.compaction",
    "SubAgentTool": "tether.context.subagent",
    "UsageLedger": "tether.context.accounting",
    "PromptCacheSimulator": "tether.context.accounting",
    "billed_input_tokens": "tether.context.accounting",
}

__all__ = [
    "CappedTool",
    "ClearOldResults",
    "CompactHistory",
    "LogSearchTool",
    "Page",
    "PromptCacheSimulator",
    "SubAgentTool",
    "UsageLedger",
    "billed_input_tokens",
    "cap_tools",
    "log_search_tool",
    "page",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.context' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


if TYPE_CHECKING:
    from tether.context.accounting import PromptCacheSimulator, UsageLedger, billed_input_tokens
    from tether.context.clearing import ClearOldResults
    from tether.context.compaction import CompactHistory
    from tether.context.log_search import LogSearchTool, log_search_tool
    from tether.context.paging import CappedTool, Page, cap_tools, page
    from tether.context.subagent import SubAgentTool
