"""A stand-in for a vLLM engine, for the tests and the call-overhead benchmark: an OpenAI-compatible chat
server on 127.0.0.1 that answers like vLLM does for Trinity.

Trinity's ModelWrapper (with history recording) asks for `return_token_ids` and
logprobs, and builds experiences from vLLM's extra response fields: the
top-level `prompt_token_ids`, and per choice `token_ids` and
`logprobs.content[*].logprob`. This server returns those fields with made-up
token ids. What it answers comes from a function of the request, so a test can
plug in any policy: a string is a text reply, a `(tool_name, arguments)` pair a
tool call. A plain function holds the server while it runs, so requests are
answered one at a time; a coroutine function lets others arrive while it waits.
It is a stand-in for a vLLM engine, not a model.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from typing import Awaitable, Callable, Union

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from runkit.serving import free_port

Reply = Union[str, tuple[str, dict]]


def _token_ids(text: str, offset: int) -> list[int]:
    # One made-up token per word (at least one), distinct from the prompt's ids.
    return [offset + i for i in range(max(1, len(text.split())))]


class FakeVLLMServer:
    """Serve `/v1/chat/completions`; `reply(request_body)` decides each answer (text or tool call).

    Use as a context manager; `.url` is the base address, `.requests` every body received.
    `tool_parser=False` stands for `vllm serve` without `--enable-auto-tool-choice --tool-call-parser`:
    like vLLM, it then answers a request that offers tools (tool choice "auto", the default) with a 400.
    """

    def __init__(self, reply: Callable[[dict], Reply | Awaitable[Reply]], tool_parser: bool = True):
        self.reply = reply
        self.tool_parser = tool_parser
        self.requests: list[dict] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = FastAPI()
        app.get("/health")(self._health)
        app.post("/v1/chat/completions", response_model=None)(self._chat)
        app.post("/v1/completions")(self._completion)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))

    async def _health(self) -> dict:
        return {}

    async def _chat(self, request: Request) -> dict | JSONResponse:
        body = await request.json()
        self.requests.append(body)
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not self.tool_parser:
            message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": 400}},
                                status_code=400)
        answer = self.reply(body)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, str):
            message, finish, text = {"role": "assistant", "content": answer}, "stop", answer
        else:
            name, arguments = answer
            text = json.dumps(arguments)
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(self.requests)}", "type": "function",
                "function": {"name": name, "arguments": text}}]}
            finish = "tool_calls"
        prompt_text = " ".join(str(m.get("content") or "") for m in body["messages"])
        prompt_ids = _token_ids(prompt_text, offset=10)
        ids = _token_ids(text, offset=100_000)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "prompt_token_ids": prompt_ids,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": finish,
                "token_ids": ids,
                "logprobs": {"content": [{"token": f"t{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                                         for i in ids]},
            }],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                      "total_tokens": len(prompt_ids) + len(ids)},
        }

    async def _completion(self, request: Request) -> dict:
        """/v1/completions as the engine ceiling sends it (prompt token ids, `ignore_eos`): `max_tokens` made-up
        tokens, with their ids where `return_token_ids` asks; `reply(body)` is awaited first and its text unused,
        so that a test can hold an answer."""
        body = await request.json()
        self.requests.append(body)
        answer = self.reply(body)
        if inspect.isawaitable(answer):
            await answer
        ids = list(range(100_000, 100_000 + body["max_tokens"]))
        choice = {"index": 0, "text": " ".join(f"t{i}" for i in ids), "finish_reason": "length"}
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
        return {"id": f"cmpl-{len(self.requests)}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", "fake"), "choices": [choice],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids),
                          "total_tokens": len(body["prompt"]) + len(ids)}}

    def __enter__(self) -> "FakeVLLMServer":
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake vLLM server did not start within 10 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
