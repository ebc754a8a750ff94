"""The model proxy: one loopback HTTP server per worker between outside coding agents and their model providers.

An agent run as a lane (Claude Code, Codex, an ACP agent) gets the proxy's address and a token of its lane instead
of a provider's key. The proxy speaks Anthropic Messages, OpenAI Responses and OpenAI Chat Completions (streaming
and not), forwards each call to the real provider with the worker's real key, counts each call's usage and cost on
the lane as the built-in loop counts its own (the same ledger line), asks the lane's budget before each call, and
records every exchange in the run's store, so a call the lane already made is answered from the record.

    proxy = ModelProxy()                      # reads the providers' base URLs and keys as the built-in ones do
    await proxy.start()                       # 127.0.0.1, a free port
    lane = proxy.open_lane(LaneKey(run_id="r1", lane="api", round=1, attempt=1), budget=hook)
    env = proxy.agent_env(lane.token)         # ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, OPENAI_BASE_URL, ...
    ...the agent runs...
    proxy.tally(lane.token)                   # LaneTally: usage, cost, calls sent upstream and answered from the record
    await proxy.stop()

Modules: lanes (a lane's key, token, tally and budget hook), wire (the three APIs: routes, upstream addresses,
error bodies), usage (usage read from a JSON reply or an SSE stream), exchanges (the record of each exchange),
accounting (pricing a call and its ledger line), server (the HTTP server itself).
"""

from reposwarm.proxy.lanes import ALLOW, BudgetAnswer, BudgetHook, LaneKey, LanePass, LaneTally, refuse
from reposwarm.proxy.server import ModelProxy

__all__ = ["ALLOW", "BudgetAnswer", "BudgetHook", "LaneKey", "LanePass", "LaneTally", "ModelProxy", "refuse"]
