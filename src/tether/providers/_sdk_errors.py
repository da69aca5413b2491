"""Translation of SDK failures into :mod:`tether.errors`, shared by the HTTP adapters.

The Anthropic and OpenAI SDKs raise the same shapes (a status error with the HTTP status
and the decoded body, a connection error, a timeout error). Adapters catch their SDK's
classes and call :func:`status_error`, :func:`timeout_error` or :func:`connection_error`;
the result is raised ``from`` the SDK exception, which never escapes.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from tether.errors import ContextWindowExceeded, ProviderError, ProviderErrorKind

_BY_STATUS: dict[int, ProviderErrorKind] = {
    400: "bad_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    408: "timeout",
    409: "server",
    413: "bad_request",
    422: "bad_request",
    429: "rate_limit",
    503: "overloaded",
    529: "overloaded",
}

# error.type (Anthropic) or error.code / error.type (OpenAI and compatible servers)
_BY_TYPE: dict[str, ProviderErrorKind] = {
    "invalid_request_error": "bad_request",
    "authentication_error": "authentication",
    "permission_error": "permission",
    "not_found_error": "not_found",
    "rate_limit_error": "rate_limit",
    "rate_limit_exceeded": "rate_limit",
    "overloaded_error": "overloaded",
    "api_error": "server",
    "server_error": "server",
    "timeout_error": "timeout",
}

_ADVICE: dict[ProviderErrorKind, str] = {
    "rate_limit": "wait, lower the request rate or raise max_retries",
    "overloaded": "the provider is busy; try again later or raise max_retries",
    "server": "the provider failed; try again later",
    "timeout": "raise the client's timeout or shorten the request",
    "connection": "check the base URL and the network",
    "authentication": "check the API key",
    "permission": "check that the key may use this model",
    "bad_request": "fix the request",
    "not_found": "check the model name and the base URL",
    "other": "see the provider's documentation",
}

_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
)
_CONTEXT_TEXT = re.compile(
    r"prompt is too long|maximum context length|context[ _]window|context length|"
    r"exceeds the available context size|too many (?:input )?tokens",
    re.IGNORECASE,
)


def _error_object(body: Any) -> dict[str, Any]:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return inner
    return {}


def _detail(body: Any, fallback: str) -> str:
    err = _error_object(body)
    message = err.get("message")
    if isinstance(message, str) and message.strip():
        return message.strip().rstrip(".")
    if isinstance(body, str) and body.strip():
        return body.strip()[:300].rstrip(".")
    return fallback.rstrip(".")


def is_context_overflow(status: int | None, body: Any, message: str = "") -> bool:
    """Whether a failure says the prompt does not fit in the model's window."""
    if status not in (None, 200, 400, 413, 422):
        return False
    err = _error_object(body)
    codes = {str(err.get(k)) for k in ("code", "type") if err.get(k)}
    if codes & _CONTEXT_CODES:
        return True
    text = err.get("message") if isinstance(err.get("message"), str) else message
    return bool(_CONTEXT_TEXT.search(str(text or message)))


def classify(status: int | None, body: Any) -> ProviderErrorKind:
    """The error kind of a provider failure: from the HTTP status when it is an error
    status, else (an error inside a 200 stream or response) from the body's type."""
    if status is not None and status >= 400 and status in _BY_STATUS:
        return _BY_STATUS[status]
    err = _error_object(body)
    for key in ("type", "code"):
        value = err.get(key)
        if isinstance(value, str) and value in _BY_TYPE:
            return _BY_TYPE[value]
    if status is None or status < 400:
        return "server"
    return "server" if status >= 500 else "other"


def translate(
    sdk: ModuleType, exc: BaseException, provider: str, timeout: float | None, base_url: str
) -> ProviderError:
    """The tether error for an exception of ``sdk`` (the ``anthropic`` or ``openai`` module)."""
    if isinstance(exc, sdk.APITimeoutError):
        return timeout_error(provider, timeout)
    if isinstance(exc, sdk.APIConnectionError):
        return connection_error(provider, base_url)
    if isinstance(exc, sdk.APIStatusError):
        return status_error(provider, exc.status_code, exc.body, exc.message)
    if isinstance(exc, sdk.APIError) and exc.body:  # an error event inside a stream
        body = (
            exc.body if isinstance(exc.body, dict) and "error" in exc.body else {"error": exc.body}
        )
        return status_error(provider, None, body, exc.message)
    return other_error(provider, exc)


def status_error(provider: str, status: int | None, body: Any, message: str = "") -> ProviderError:
    """A typed error for an HTTP error status, or (``status=None``) an error reported
    inside a response or a stream."""
    where = f"HTTP {status}" if status is not None else "in the response"
    detail = _detail(body, message or where)
    if is_context_overflow(status, body, message):
        return ContextWindowExceeded(
            f"{provider} says the request exceeds the model's context window ({detail}); "
            "shorten the history or use a model with a larger window."
        )
    kind = classify(status, body)
    return ProviderError(
        f"{provider} request failed with {kind} ({where}): {detail}; {_ADVICE[kind]}.",
        kind=kind,
        status=status,
    )


def timeout_error(provider: str, timeout: float | None) -> ProviderError:
    """A typed error for a request that timed out after the SDK's retries."""
    limit = f" after {timeout:g} s" if timeout is not None else ""
    return ProviderError(
        f"{provider} request timed out{limit}; {_ADVICE['timeout']}.", kind="timeout"
    )


def connection_error(provider: str, base_url: str) -> ProviderError:
    """A typed error for a request that could not reach the provider."""
    return ProviderError(
        f"{provider} could not be reached at {base_url}; {_ADVICE['connection']}.",
        kind="connection",
    )


def other_error(provider: str, exc: BaseException) -> ProviderError:
    """A typed error for any other SDK failure (an unreadable response, for example)."""
    return ProviderError(
        f"{provider} request failed ({type(exc).__name__}: {exc}); {_ADVICE['other']}.",
        kind="other",
    )
