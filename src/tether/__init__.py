"""tether: a runtime for tool-using LLM agents in which every bound is built in.

Importing tether does no I/O and loads no heavy dependency; names are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # messages
    "Message": "tether.messages",
    "Text": "tether.messages",
    "ToolCall": "tether.messages",
    "ToolResult": "tether.messages",
    "Usage": "tether.messages",
    "StopReason": "tether.messages",
    # history
    "check_history": "tether.history",
    "Violation": "tether.history",
    # tools
    "tool": "tether.tools",
    "Tool": "tether.tools",
    "DelegatingTool": "tether.tools",
    "FunctionTool": "tether.tools",
    "ToolSpec": "tether.tools",
    "RunContext": "tether.tools",
    "lint": "tether.tools",
    # clients
    "ChatClient": "tether.clients",
    "ChatOptions": "tether.clients",
    "ChatResponse": "tether.clients",
    "BaseChatClient": "tether.clients",
    "DelegatingChatClient": "tether.clients",
    "ClientPipeline": "tether.clients",
    "OutputSchema": "tether.clients",
    # structured output
    "extract": "tether.structured",
    "Extraction": "tether.structured",
    # workflows
    "Workflow": "tether.workflows",
    "WorkflowResult": "tether.workflows",
    "run_workflow": "tether.workflows",
    # loop
    "Agent": "tether.loop",
    "Limits": "tether.limits",
    "Pricing": "tether.limits",
    "Outcome": "tether.outcomes",
    "RunResult": "tether.outcomes",
    "RunState": "tether.run_state",
    "PendingApproval": "tether.run_state",
    "Decision": "tether.run_state",
    "StateKeys": "tether.state_seal",
    "ToolLoopChatClient": "tether.tool_loop_client",
    # test doubles
    "ScriptedClient": "tether.providers.scripted",
    "FaultyClient": "tether.providers.faults",
    # errors
    "TetherError": "tether.errors",
    "ConfigError": "tether.errors",
    "ProviderError": "tether.errors",
    "ContextWindowExceeded": "tether.errors",
    "ToolFailure": "tether.errors",
    "InvalidArguments": "tether.errors",
    "InvalidHistoryError": "tether.errors",
    "RunNotCompleted": "tether.errors",
    "StateError": "tether.errors",
    "StructuredOutputError": "tether.errors",
    "WorkflowNotCompleted": "tether.errors",
    "ReplayDivergence": "tether.errors",
}
_RENAMED = {"check_history": "check"}

__all__ = [
    "Agent",
    "BaseChatClient",
    "ChatClient",
    "ChatOptions",
    "ChatResponse",
    "ClientPipeline",
    "ConfigError",
    "ContextWindowExceeded",
    "Decision",
    "DelegatingChatClient",
    "DelegatingTool",
    "Extraction",
    "FaultyClient",
    "FunctionTool",
    "InvalidArguments",
    "InvalidHistoryError",
    "Limits",
    "Message",
    "Outcome",
    "OutputSchema",
    "PendingApproval",
    "Pricing",
    "ProviderError",
    "ReplayDivergence",
    "RunContext",
    "RunNotCompleted",
    "RunResult",
    "RunState",
    "ScriptedClient",
    "StateError",
    "StateKeys",
    "StopReason",
    "StructuredOutputError",
    "TetherError",
    "Text",
    "Tool",
    "ToolCall",
    "ToolFailure",
    "ToolLoopChatClient",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "Violation",
    "Workflow",
    "WorkflowNotCompleted",
    "WorkflowResult",
    "check_history",
    "extract",
    "lint",
    "run_workflow",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])


if TYPE_CHECKING:
    from tether.clients import (
        BaseChatClient,
        ChatClient,
        ChatOptions,
        ChatResponse,
        ClientPipeline,
        DelegatingChatClient,
        OutputSchema,
    )
    from tether.errors import (
        ConfigError,
        ContextWindowExceeded,
        InvalidArguments,
        InvalidHistoryError,
        ProviderError,
        ReplayDivergence,
        RunNotCompleted,
        StateError,
        StructuredOutputError,
        TetherError,
        ToolFailure,
        WorkflowNotCompleted,
    )
    from tether.history import Violation
    from tether.history import check as check_history
    from tether.limits import Limits, Pricing
    from tether.loop import Agent
    from tether.messages import Message, StopReason, Text, ToolCall, ToolResult, Usage
    from tether.outcomes import Outcome, RunResult
    from tether.providers.faults import FaultyClient
    from tether.providers.scripted import ScriptedClient
    from tether.run_state import Decision, PendingApproval, RunState
    from tether.state_seal import StateKeys
    from tether.structured import Extraction, extract
    from tether.tool_loop_client import ToolLoopChatClient
    from tether.tools import (
        DelegatingTool,
        FunctionTool,
        RunContext,
        Tool,
        ToolSpec,
        lint,
        tool,
    )
    from tether.workflows import Workflow, WorkflowResult, run_workflow
