"""``extract()`` always sends an output cap: an OpenAI-compatible server without a default
one (llama.cpp's) otherwise writes until its context is full."""

from __future__ import annotations

from provider_server import FakeProvider, Reply
from provider_wire import c_completion
from pydantic import BaseModel

from tether import ChatOptions, extract
from tether.providers.openai_chat import OpenAIChatClient


class Tri(BaseModel):
    motif: str


async def test_extract_sends_max_tokens(server: FakeProvider) -> None:
    server.script = [Reply(c_completion('{"motif":"Suivi"}'))] * 2
    client = OpenAIChatClient("m", base_url=f"{server.url}/v1", max_retries=0)
    tri = await extract(client, "Ou est mon colis ?", Tri)
    assert tri.output.motif == "Suivi"
    assert server.bodies()[0]["max_tokens"] == 4096  # structured.EXTRACT_MAX_OUTPUT_TOKENS
    await extract(client, "Ou est mon colis ?", Tri, options=ChatOptions(max_output_tokens=64))
    assert server.bodies()[1]["max_tokens"] == 64  # a cap given is kept
