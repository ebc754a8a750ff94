"""A small coding agent that speaks the Agent Client Protocol (the `agent-client-protocol` package's agent side), for
tests of reposwarm's generic ACP path (reposwarm/agents/acp.py).

It does what its model tells it: each prompt turn asks the model (OpenAI Chat Completions at $OPENAI_BASE_URL, with
$OPENAI_API_KEY: the lane's proxy and token) with four tools, and carries out each tool call through its client:
- write_file {path, content}: announces an edit, asks permission (session/request_permission), and only if allowed
  writes through fs/write_text_file;
- write_file_unasked {path, content}: writes through fs/write_text_file without asking (as a careless agent would);
- read_file {path}: reads through fs/read_text_file;
- show_env {}: its own environment and network interfaces, as the tool's result (what reached the sandbox).
Each result (or the client's error, word for word) goes back to the model; a reply with no tool call ends the turn,
its text sent as the agent's message. Paths the model gives are relative to the session's cwd.

With `--load` it advertises session/load (the earlier conversation replayed as updates), with `--resume`
session/resume; either way it keeps each session's conversation in $XDG_STATE_HOME/fake-acp/<id>.json.

Run as: python fake_acp_agent.py [--load | --resume] (its stdin and stdout are the ACP connection).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any, cast

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_edit_tool_call,
    start_read_tool_call,
    update_agent_message_text,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionResumeCapabilities,
    ToolCallUpdate,
)

MODEL = "gpt-4o-mini"
TOOLS = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {key: {"type": "string"} for key in keys}, "required": list(keys)}}}
    for name, keys in (("write_file", ("path", "content")), ("write_file_unasked", ("path", "content")),
                       ("read_file", ("path",)), ("show_env", ()))]


def ask_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = json.dumps({"model": MODEL, "messages": messages, "tools": TOOLS}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", data=body,
                                     headers={"content-type": "application/json",
                                              "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(request, timeout=60) as answer:
        message: dict[str, Any] = json.loads(answer.read())["choices"][0]["message"]
    return message


class FakeAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cwd: dict[str, str] = {}
        self.cancelled: set[str] = set()
        self.conversations: dict[str, list[dict[str, Any]]] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        capabilities = AgentCapabilities(
            load_session="--load" in sys.argv,
            session_capabilities=SessionCapabilities(resume=SessionResumeCapabilities()) if "--resume" in sys.argv
            else None)
        return InitializeResponse(protocol_version=PROTOCOL_VERSION, agent_capabilities=capabilities)

    def _saved(self, session_id: str) -> str:
        return os.path.join(os.environ.get("XDG_STATE_HOME", "/tmp"), "fake-acp", session_id + ".json")

    def _restore(self, cwd: str, session_id: str) -> list[dict[str, Any]]:
        try:
            with open(self._saved(session_id)) as saved:
                messages: list[dict[str, Any]] = json.load(saved)
        except (OSError, ValueError):
            raise RequestError.resource_not_found(session_id) from None
        self.cwd[session_id], self.conversations[session_id] = cwd, messages
        return messages

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           **kwargs: Any) -> LoadSessionResponse:
        for message in self._restore(cwd, session_id):  # (the history, replayed to the client as the protocol says)
            if message["role"] == "user":
                await self.conn.session_update(session_id, update_user_message_text(message["content"]))
            elif message["role"] == "assistant" and message.get("content"):
                await self.conn.session_update(session_id, update_agent_message_text(message["content"]))
        return LoadSessionResponse()

    async def resume_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                             **kwargs: Any) -> ResumeSessionResponse:
        self._restore(cwd, session_id)
        return ResumeSessionResponse()

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        self.cwd[session_id] = cwd
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        messages = self.conversations.setdefault(session_id, [])
        messages.append({"role": "user", "content": text})
        try:
            return await self._turn(session_id, messages)
        finally:
            os.makedirs(os.path.dirname(self._saved(session_id)), exist_ok=True)
            with open(self._saved(session_id), "w") as saved:
                json.dump(messages, saved)

    async def _turn(self, session_id: str, messages: list[dict[str, Any]]) -> PromptResponse:
        for _ in range(20):
            if session_id in self.cancelled:
                return PromptResponse(stop_reason="cancelled")
            reply = await asyncio.to_thread(ask_model, messages)
            calls = reply.get("tool_calls") or []
            messages.append({"role": "assistant", "content": reply.get("content"), "tool_calls": calls or None}
                            if calls else {"role": "assistant", "content": reply.get("content") or ""})
            if not calls:
                await self.conn.session_update(session_id, update_agent_message_text(reply.get("content") or ""))
                return PromptResponse(stop_reason="end_turn")
            for call in calls:
                result = await self.tool(session_id, call["id"], call["function"]["name"],
                                         json.loads(call["function"]["arguments"] or "{}"))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return PromptResponse(stop_reason="max_turn_requests")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.add(session_id)

    async def tool(self, session_id: str, call_id: str, name: str, args: dict[str, Any]) -> str:
        path = os.path.join(self.cwd[session_id], args.get("path", ""))
        try:
            if name in ("write_file", "write_file_unasked"):
                start = start_edit_tool_call(call_id, f"write {args['path']}", path, args["content"])
                await self.conn.session_update(session_id, start)
                if name == "write_file":
                    asked = ToolCallUpdate(tool_call_id=call_id, kind="edit", title=start.title,
                                           locations=start.locations)
                    answer = await self.conn.request_permission(
                        session_id=session_id, tool_call=asked, options=[
                            PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                            PermissionOption(option_id="no", name="Reject", kind="reject_once")])
                    if getattr(answer.outcome, "option_id", None) != "yes":
                        why = (answer.field_meta or {}).get("reposwarm", "")
                        return f"permission rejected: {why}"
                await self.conn.write_text_file(session_id=session_id, path=path, content=args["content"])
                return "written"
            if name == "read_file":
                await self.conn.session_update(session_id, start_read_tool_call(call_id, f"read {args['path']}", path))
                return str((await self.conn.read_text_file(session_id=session_id, path=path)).content)
            if name == "show_env":
                with open("/proc/net/dev") as table:  # (its network interfaces, as /proc/net/dev lists them)
                    interfaces = [row.split(":")[0].strip() for row in table.read().splitlines()[2:]]
                return json.dumps({**os.environ, "_interfaces": interfaces}, sort_keys=True)
            return f"no tool {name}"
        except RequestError as err:  # the client's refusal, word for word, as the tool's result
            return f"error: {err}"


if __name__ == "__main__":
    # (it has the few methods of acp.Agent a session needs; the library answers the others method-not-found)
    # (session/resume is of ACP's unstable part in this package: served only when asked for)
    asyncio.run(run_agent(cast(Any, FakeAgent()), use_unstable_protocol="--resume" in sys.argv))
