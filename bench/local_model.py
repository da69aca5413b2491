"""Latency and tool-call accuracy of the embedded local model: runtimes, threads, busy CPUs.

Run: ``uv run python bench/local_model.py`` (a few minutes on 2 cores). Every configuration
runs in a fresh process, interleaved, so each one loads the model cold and all of them see
the same machine. Prints a table: model load, first tool-call turn (cold: nothing cached),
the same turn again (warm: the prompt prefix is reused), a full demo run (call, tool,
answer), and how many prompts got exactly the right ``lire_commande`` call.

``--busy N`` adds rows measured while N other processes keep a core busy each (a loaded
machine). ``--runtimes`` compares the embedded runtime (``xllamacpp``) with the one it
replaced (``llama-cpp-python``, in ``bench/_llama_cpp_python_runtime.py``), skipped when
``llama_cpp`` cannot be imported. It needs a source build (a compiler, CMake, minutes), with
portable options on a VM: ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
-DGGML_F16C=ON" uv run --with llama-cpp-python python bench/local_model.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RUNTIMES = ("xllamacpp", "llama-cpp-python")
PROMPTS = [
    "Ou en est ma commande C-1042 ?",
    "Where is my order C-2210?",
    "Can you check order C-1042 for me?",
    "What is the status of C-2210?",
    "Bonjour, ma commande C-2210 est-elle livree ?",
    "Has C-1042 shipped yet?",
]
INSTRUCTIONS = "You are a customer-support agent. Answer from tool results only."


@dataclass
class Row:
    runtime: str
    threads: int
    busy: int
    omp_wait: str = "shipped"
    load_s: float = 0.0
    cold_turn_s: float = 0.0
    warm_turn_s: float = 0.0
    call_tokens: int = 0
    demo_run_s: float = 0.0
    demo_outcome: str = ""
    correct: int = 0
    total: int = len(PROMPTS)
    note: str = ""


def _runtime(name: str) -> Any:
    if name == "xllamacpp":
        from tether.providers import local

        return local
    sys.path.insert(0, str(Path(__file__).parent))
    import _llama_cpp_python_runtime

    return _llama_cpp_python_runtime


async def measure(runtime_name: str, threads: int, busy: int) -> Row:
    from tether.clients import ChatOptions
    from tether.constrained import ConstrainedToolCalling
    from tether.demo import demo_agent, read_order
    from tether.limits import Limits
    from tether.messages import Message

    options = ChatOptions(instructions=INSTRUCTIONS, max_output_tokens=96)
    row = Row(runtime_name, threads, busy)
    start = time.perf_counter()
    runtime = _runtime(runtime_name)
    local = runtime.LocalClient(settings=runtime.LocalSettings(n_threads=threads))
    local.model()
    row.load_s = time.perf_counter() - start
    client = ConstrainedToolCalling(local)
    history = [Message.user(PROMPTS[0])]

    start = time.perf_counter()
    first = await client.complete(history, [read_order.spec], options)
    row.cold_turn_s = time.perf_counter() - start
    row.call_tokens = first.usage.output_tokens

    start = time.perf_counter()
    await client.complete(history, [read_order.spec], options)
    row.warm_turn_s = time.perf_counter() - start

    agent = demo_agent(client)
    agent.limits = Limits(max_turns=4)
    agent.options = options
    start = time.perf_counter()
    result = await agent.run(PROMPTS[0])
    row.demo_run_s = time.perf_counter() - start
    row.demo_outcome = result.outcome.kind

    for prompt in PROMPTS:
        response = await client.complete([Message.user(prompt)], [read_order.spec], options)
        calls = response.message.tool_calls
        wanted = re.search(r"C-\d{4}", prompt)
        if (
            len(calls) == 1
            and calls[0].name == "lire_commande"
            and wanted is not None
            and calls[0].arguments == {"numero": wanted.group()}
        ):
            row.correct += 1
    return row


def _spin() -> None:
    while True:
        pass


def _one(runtime: str, threads: int, busy: int, omp_wait: str) -> Row:
    """Measure one configuration in a fresh process, with ``busy`` spinning processes."""
    if runtime == "llama-cpp-python" and importlib.util.find_spec("llama_cpp") is None:
        note = "not installed (uv run --with llama-cpp-python)"
        return Row(runtime, threads, busy, omp_wait, note=note)
    env = dict(os.environ)
    if omp_wait != "shipped":
        env["OMP_WAIT_POLICY"] = omp_wait
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    try:
        argv = [sys.executable, __file__, "--one", runtime, str(threads), str(busy)]
        out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    finally:
        for p in spinners:
            p.terminate()
            p.join()
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return Row(runtime, threads, busy, omp_wait, note=f"failed: {out.stderr.strip()[-300:]}")
    return Row(**{**json.loads(lines[-1]), "omp_wait": omp_wait})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES))
    parser.add_argument("--busy", type=int, nargs="+", default=[0], help="busy processes")
    parser.add_argument(
        "--omp-wait",
        nargs="+",
        choices=["shipped", "active", "passive"],
        default=["shipped"],
        help="OMP_WAIT_POLICY: as each runtime sets it (shipped), or forced",
    )
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        runtime, threads, busy = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(asdict(asyncio.run(measure(runtime, threads, busy)))))
        return
    rows = [
        _one(runtime, threads, busy, wait)
        for busy in args.busy
        for threads in args.threads
        for wait in args.omp_wait
        for runtime in args.runtimes
    ]
    print(
        "| runtime | OMP wait | threads | busy cores | load (s) | first tool-call turn (s) "
        "| same turn, warm (s) | call tokens | demo run (s) | demo outcome | correct calls |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        head = f"| {r.runtime} | {r.omp_wait} | {r.threads} | {r.busy} |"
        if r.note:
            print(f"{head} {r.note} |")
            continue
        print(
            f"{head} {r.load_s:.2f} | {r.cold_turn_s:.2f} "
            f"| {r.warm_turn_s:.2f} | {r.call_tokens} | {r.demo_run_s:.2f} | {r.demo_outcome} "
            f"| {r.correct}/{r.total} |"
        )


if __name__ == "__main__":
    main()
