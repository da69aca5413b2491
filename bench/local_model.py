"""Latency and tool-call accuracy of the embedded local model, on 1 and 2 threads.

Run: ``uv run python bench/local_model.py`` (about a minute on 2 cores). Prints a table:
model load, first tool-call turn (cold: no prompt cache), the same turn again (warm: the
prompt prefix is reused), a full demo run (call, tool, answer), and how many prompts got
exactly the right ``lire_commande`` call.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from dataclasses import dataclass

from tether.clients import ChatOptions
from tether.constrained import ConstrainedToolCalling
from tether.demo import demo_agent, read_order
from tether.limits import Limits
from tether.messages import Message
from tether.providers.local import LocalClient, LocalSettings

PROMPTS = [
    "Ou en est ma commande C-1042 ?",
    "Where is my order C-2210?",
    "Can you check order C-1042 for me?",
    "What is the status of C-2210?",
    "Bonjour, ma commande C-2210 est-elle livree ?",
    "Has C-1042 shipped yet?",
]
INSTRUCTIONS = "You are a customer-support agent. Answer from tool results only."
OPTIONS = ChatOptions(instructions=INSTRUCTIONS, max_output_tokens=96)


@dataclass
class Row:
    threads: int
    load_s: float
    cold_turn_s: float
    warm_turn_s: float
    demo_run_s: float
    demo_outcome: str
    correct: int
    total: int


async def measure(threads: int) -> Row:
    start = time.perf_counter()
    local = LocalClient(settings=LocalSettings(n_threads=threads))
    local.model()
    load = time.perf_counter() - start
    client = ConstrainedToolCalling(local)
    history = [Message.user(PROMPTS[0])]

    local.model().llama.reset()  # no prompt prefix reused: a first answer
    start = time.perf_counter()
    await client.complete(history, [read_order.spec], OPTIONS)
    cold = time.perf_counter() - start

    start = time.perf_counter()
    await client.complete(history, [read_order.spec], OPTIONS)
    warm = time.perf_counter() - start

    agent = demo_agent(client)
    agent.limits = Limits(max_turns=4)
    agent.options = OPTIONS
    start = time.perf_counter()
    result = await agent.run(PROMPTS[0])
    demo = time.perf_counter() - start

    correct = 0
    for prompt in PROMPTS:
        response = await client.complete([Message.user(prompt)], [read_order.spec], OPTIONS)
        calls = response.message.tool_calls
        wanted = re.search(r"C-\d{4}", prompt)
        if (
            len(calls) == 1
            and calls[0].name == "lire_commande"
            and wanted is not None
            and calls[0].arguments == {"numero": wanted.group()}
        ):
            correct += 1
    return Row(threads, load, cold, warm, demo, result.outcome.kind, correct, len(PROMPTS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print(LocalClient().banner(), "\n")
    rows = [asyncio.run(measure(n)) for n in args.threads]
    print(
        "| threads | load (s) | first tool-call turn (s) | same turn, warm (s) "
        "| demo run (s) | demo outcome | correct calls |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.threads} | {r.load_s:.2f} | {r.cold_turn_s:.2f} | {r.warm_turn_s:.2f} "
            f"| {r.demo_run_s:.2f} | {r.demo_outcome} | {r.correct}/{r.total} |"
        )


if __name__ == "__main__":
    main()
