"""Record a run to a cassette, replay it as a deterministic test, report the first divergence.

::

    recorder = Recorder(secrets=[customer_token])
    agent = recorder.instrument(Agent(client, tools, instructions=...))
    result = await agent.run("Ou en est ma commande C-1042 ?")
    recorder.finish(result)
    recorder.save("tests/cassettes/order.json")

    replayer = Replayer(Cassette.load("tests/cassettes/order.json"))
    agent = replayer.instrument(Agent(ScriptedClient([]), tools, instructions=...))
    replayer.verify(await agent.run("Ou en est ma commande C-1042 ?"))  # raises on a difference

Recording works at the model seam, so a cassette is the same for every provider. On
replay the recorded responses drive the run; the tools run for real and their results are
compared with the recorded ones (``stub_tools=True`` returns the recorded results instead).
The first difference raises :class:`~tether.errors.ReplayDivergence` naming the turn, the
call or argument, with a readable diff; :meth:`Replayer.verify` raises it again after the run
(the loop turns a client's exception into a ``failed`` outcome), and also reports requests or
calls that were recorded but not made, and a different outcome. Workflows take a recorder or
replayer as ``run_workflow(..., tape=...)`` for their tool steps and its ``client()``.
"""

from __future__ import annotations

from tether.replay.cassette import Cassette, Redactor
from tether.replay.recorder import Recorder
from tether.replay.replayer import Replayer, replay_agent_run

__all__ = ["Cassette", "Recorder", "Redactor", "Replayer", "replay_agent_run"]
