#!/usr/bin/env python3
"""An OpenAI-compatible server in the shape vLLM's answers, for the tests
and benchmarks that put wirespeed in front of one: FastAPI on uvicorn.

  GET  /v1/models            lists MODEL
  POST /v1/chat/completions  answers the last message's words back, one
                             chunk a word when streamed (a role chunk
                             first, the finish, a usage chunk when asked)
  POST /v1/completions       the prompt's words back, the same way
  POST /v1/embeddings        a vector of DIMENSIONS floats a text, made
                             from its bytes; float or base64

Request fields of its own (vLLM takes fields beyond OpenAI's too):
`delay_ms` waits that long before each streamed word; `gate` waits after
the first word until the test opens `Standin.gate`. A message (or prompt)
that starts with FAIL breaks the connection after two words. An unknown
model is vLLM's 404, a temperature above 2 its 400, `"overloaded"` as the
user a 429. Every request body is kept in `Standin.bodies`; a stream whose
client left is counted in `Standin.left`.

Usage: openai_standin.py --port P   (binds 127.0.0.1)
"""
import argparse
import asyncio
import base64
import json
import socket
import struct
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

MODEL = "standin/llm-7b"
DIMENSIONS = 8


class Standin:
    """The app and what the tests read of it."""

    def __init__(self):
        self.bodies = []
        self.left = 0
        self.left_event = threading.Event()
        self.gate = threading.Event()
        self.app = self._app()

    def _app(self):
        app = FastAPI()
        standin = self

        def error(status, message, kind, param=None):
            return JSONResponse(status_code=status, content={
                "error": {"message": message, "type": kind, "param": param, "code": status}})

        def refused(body):
            if body.get("model") != MODEL:
                return error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError", "model")
            if body.get("temperature", 1) > 2:
                return error(400, "temperature must be at most 2, got " + str(body["temperature"]),
                             "BadRequestError", "temperature")
            if body.get("user") == "overloaded":
                return error(429, "the engine's queue is full", "RateLimitError")
            return None

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 1700000000, "owned_by": "vllm"}]}

        async def generate(request, body, chat):
            standin.bodies.append(body)
            if (answer := refused(body)) is not None:
                return answer
            if chat:
                text = body["messages"][-1]["content"]
                prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
            else:
                text = body["prompt"]
                prompt_tokens = len(text.split())
            words = text.split()
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            finish = "stop"
            if limit is not None and limit < len(words):
                words, finish = words[:limit], "length"
            pieces = [(" " if i else "") + w for i, w in enumerate(words)]
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                     "total_tokens": prompt_tokens + len(pieces)}
            head = {"id": "chatcmpl-standin" if chat else "cmpl-standin",
                    "created": int(time.time()), "model": MODEL}
            if not body.get("stream"):
                if chat:
                    choice = {"index": 0, "message": {"role": "assistant", "content": "".join(pieces)},
                              "logprobs": None, "finish_reason": finish}
                else:
                    choice = {"index": 0, "text": "".join(pieces), "logprobs": None, "finish_reason": finish}
                return {**head, "object": "chat.completion" if chat else "text_completion",
                        "choices": [choice], "usage": usage}

            def chunk(piece=None, finish_reason=None, role=False):
                if chat:
                    delta = {"role": "assistant", "content": ""} if role else (
                        {"content": piece} if piece is not None else {})
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                    return {**head, "object": "chat.completion.chunk", "choices": [choice]}
                choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish_reason}
                return {**head, "object": "text_completion", "choices": [choice]}

            def event(value):
                return f"data: {json.dumps(value)}\n\n".encode()

            delay = body.get("delay_ms", 0) / 1000

            async def events():
                ended = False
                try:
                    if chat:
                        yield event(chunk(role=True))
                    for i, piece in enumerate(pieces):
                        if delay:
                            await asyncio.sleep(delay)
                        if i == 2 and text.startswith("FAIL"):
                            raise RuntimeError("the engine died mid-stream")
                        yield event(chunk(piece))
                        if i == 0 and body.get("gate"):
                            await asyncio.get_running_loop().run_in_executor(None, standin.gate.wait, 60)
                    yield event(chunk(finish_reason=finish))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        yield event({**head, "object": chunk()["object"], "choices": [], "usage": usage})
                    yield b"data: [DONE]\n\n"
                    ended = True
                finally:
                    if not ended and not text.startswith("FAIL"):
                        standin.left += 1
                        standin.left_event.set()

            return StreamingResponse(events(), media_type="text/event-stream")

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await generate(request, await request.json(), True)

        @app.post("/v1/completions")
        async def completions(request: Request):
            return await generate(request, await request.json(), False)

        @app.post("/v1/embeddings")
        async def embeddings(request: Request):
            body = await request.json()
            standin.bodies.append(body)
            if (answer := refused(body)) is not None:
                return answer
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = []
            for i, text in enumerate(texts):
                raw = text.encode()
                vector = [((sum(raw[k::DIMENSIONS]) % 97) - 48) / 7.0 for k in range(DIMENSIONS)]
                if body.get("encoding_format") == "base64":
                    vector = base64.b64encode(struct.pack(f"<{DIMENSIONS}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": vector})
            tokens = sum(len(t.split()) for t in texts)
            return {"object": "list", "data": data, "model": MODEL,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

        return app


class Running:
    """The stand-in served on a loopback port of its own, in a thread."""

    def __init__(self, port=0):
        self.standin = Standin()
        self.socket = socket.socket()
        # A stand-in started again on its port, as a replica comes back.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port))
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(self.standin.app, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenAI stand-in did not start")
            time.sleep(0.01)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(Standin().app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
