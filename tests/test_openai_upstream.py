"""wirespeed in front of an upstream OpenAI server (`backend = "upstream"`
with an OpenAI URL), asked with the official `openai` package, sync and
async, unmodified.

The upstream is a stand-in written here in the shape vLLM answers
(`tests/upstream/openai_standin.py`: FastAPI, streams with delays, fails
mid-stream on request). The reference is the same SDK asking the stand-in
directly: through wirespeed every answer, chunk and usage must be the
upstream's, with only `model` renamed to wirespeed's name.
"""

import asyncio
import base64
import json
import sys

import numpy as np
import openai
import pytest
import requests

from conftest import ROOT, RunningServer, free_port, wait_until

sys.path.insert(0, str(ROOT / "tests" / "upstream"))
import openai_standin  # noqa: E402

MESSAGES = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "the quick brown fox jumps over the lazy dog"}]


@pytest.fixture(scope="module")
def standin():
    running = openai_standin.Running()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server(standin, tmp_path_factory):
    root = tmp_path_factory.mktemp("openai-upstream")
    (root / "llm").mkdir()
    (root / "llm" / "config.toml").write_text(
        f'backend = "upstream"\nurl = "{standin.base_url}"\nmodel = "{openai_standin.MODEL}"\n')
    (root / "gone").mkdir()
    (root / "gone" / "config.toml").write_text(
        f'backend = "upstream"\nurl = "http://127.0.0.1:{free_port()}/v1"\n')
    running = RunningServer(root, ["--metrics", "127.0.0.1:0"])
    wait_until("the upstream model's readiness",
               lambda: requests.get(f"http://{running.address}/v2/models/llm/ready", timeout=5).status_code == 200)
    yield running
    running.stop()


def ours(server):
    return openai.OpenAI(base_url=f"http://{server.address}/v1", api_key="none")


def direct(standin):
    return openai.OpenAI(base_url=standin.base_url, api_key="none")


def without_model(answer):
    """An answer as a dict, `model` and `created` aside."""
    value = answer.model_dump()
    value.pop("created", None)
    return value, value.pop("model")


def test_chat_answers_are_the_upstreams(server, standin):
    with ours(server) as c, direct(standin) as d:
        for ask in [dict(), dict(max_tokens=3), dict(temperature=0.2, seed=7, stop=["\n"])]:
            through, model = without_model(c.chat.completions.create(model="llm", messages=MESSAGES, **ask))
            there, their_model = without_model(d.chat.completions.create(
                model=openai_standin.MODEL, messages=MESSAGES, **ask))
            assert (model, their_model) == ("llm", openai_standin.MODEL)
            assert through == there
        assert through["choices"][0]["message"]["content"] == "the quick brown fox jumps over the lazy dog"


def test_the_request_goes_as_the_client_wrote_it(server, standin):
    """vLLM's own fields (`top_k`, `n`, `logprobs`) pass through; only
    `model` is renamed."""
    with ours(server) as c:
        c.chat.completions.create(model="llm", messages=MESSAGES, n=1, logprobs=True,
                                  extra_body={"top_k": 5, "repetition_penalty": 1.1})
    sent = standin.standin.bodies[-1]
    assert sent["model"] == openai_standin.MODEL
    assert sent["top_k"] == 5 and sent["repetition_penalty"] == 1.1 and sent["logprobs"] is True
    assert sent["messages"] == MESSAGES


def test_streams_are_the_upstreams_chunk_for_chunk(server, standin):
    with ours(server) as c, direct(standin) as d:
        for create, kwargs in [
            ("chat", dict(messages=MESSAGES, stream_options={"include_usage": True}, extra_body={"delay_ms": 5})),
            ("completions", dict(prompt="once upon a time there was a stream", max_tokens=4)),
        ]:
            ask = (lambda client: client.chat.completions) if create == "chat" else (lambda client: client.completions)
            through = [without_model(ch) for ch in ask(c).create(model="llm", stream=True, **kwargs)]
            there = [without_model(ch) for ch in ask(d).create(model=openai_standin.MODEL, stream=True, **kwargs)]
            assert [m for _, m in through] == ["llm"] * len(there)
            assert [v for v, _ in through] == [v for v, _ in there]
        assert through[-1][0]["choices"][0]["finish_reason"] == "length"


def test_each_event_is_sent_on_as_it_arrives(server, standin):
    """The stand-in holds its stream after the first word until the test
    opens its gate: the first word must reach the client before then."""
    standin.standin.gate.clear()
    with ours(server) as c:
        stream = c.chat.completions.create(model="llm", messages=MESSAGES, stream=True, extra_body={"gate": True})
        chunks = iter(stream)
        role = next(chunks)
        assert role.choices[0].delta.role == "assistant"
        first = next(chunks)
        assert first.choices[0].delta.content == "the"
        assert not standin.standin.gate.is_set()
        standin.standin.gate.set()
        rest = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert rest == " quick brown fox jumps over the lazy dog"


def test_async_client(server, standin):
    async def run():
        async with openai.AsyncOpenAI(base_url=f"http://{server.address}/v1", api_key="none") as c:
            answer = await c.completions.create(model="llm", prompt="async prompt here")
            assert answer.choices[0].text == "async prompt here" and answer.model == "llm"
            pieces = []
            async for ch in await c.chat.completions.create(model="llm", messages=MESSAGES, stream=True):
                pieces.extend(choice.delta.content or "" for choice in ch.choices)
            assert "".join(pieces) == MESSAGES[-1]["content"]
            vectors = await c.embeddings.create(model="llm", input=["a", "bc"])
            return vectors

    vectors = asyncio.run(run())
    with direct(standin) as d:
        there = d.embeddings.create(model=openai_standin.MODEL, input=["a", "bc"])
    assert [v.embedding for v in vectors.data] == [v.embedding for v in there.data]


def test_embeddings_float_and_base64(server, standin):
    texts = ["wirespeed", "an upstream's embeddings"]
    with ours(server) as c, direct(standin) as d:
        through = c.embeddings.create(model="llm", input=texts, encoding_format="float")
        there = d.embeddings.create(model=openai_standin.MODEL, input=texts, encoding_format="float")
        assert [v.embedding for v in through.data] == [v.embedding for v in there.data]
        assert through.usage == there.usage and through.model == "llm"
    raw = requests.post(f"http://{server.address}/v1/embeddings", timeout=10,
                        json={"model": "llm", "input": texts[0], "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(vector, np.array(there.data[0].embedding, dtype=np.float32))


def test_a_failure_mid_stream_is_an_error_event(server, standin):
    with ours(server) as c:
        stream = c.chat.completions.create(
            model="llm", stream=True, messages=[{"role": "user", "content": "FAIL after two words"}])
        seen = []
        with pytest.raises(openai.APIError) as failed:
            for ch in stream:
                seen.extend(choice.delta.content or "" for choice in ch.choices)
        assert "".join(seen) == "FAIL after"
        assert "broke off" in str(failed.value)
    # The server goes on answering.
    with ours(server) as c:
        assert c.completions.create(model="llm", prompt="still up").choices[0].text == "still up"


def test_upstream_errors_keep_their_meaning(server, standin):
    with ours(server) as c, direct(standin) as d:
        for client, model in [(c, "llm"), (d, openai_standin.MODEL)]:
            with pytest.raises(openai.BadRequestError) as bad:
                client.chat.completions.create(model=model, messages=MESSAGES, temperature=2.5)
            assert "temperature must be at most 2" in str(bad.value)
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="nosuch", messages=MESSAGES)
    # A 429 is OpenAI's rate_limit_error (asked once: the SDK retries 429s).
    r = requests.post(f"http://{server.address}/v1/chat/completions", timeout=10,
                      json={"model": "llm", "messages": MESSAGES, "user": "overloaded"})
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error", r.text
    assert "the engine's queue is full" in r.json()["error"]["message"]
    # An upstream that is not there: the model is not ready, a 503.
    r = requests.post(f"http://{server.address}/v1/chat/completions", timeout=10,
                      json={"model": "gone", "messages": MESSAGES})
    assert r.status_code == 503 and r.json()["error"]["type"] == "server_error", r.text
    assert requests.get(f"http://{server.address}/v2/models/gone/ready", timeout=10).status_code != 200


def test_a_client_that_leaves_cancels_the_upstream_request(server, standin):
    left = standin.standin.left
    standin.standin.left_event.clear()
    body = {"model": "llm", "stream": True, "messages": [{"role": "user", "content": "word " * 500}],
            "delay_ms": 20}
    with requests.post(f"http://{server.address}/v1/chat/completions", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200, r.text
        lines = r.iter_lines()
        assert next(lines).startswith(b"data: ")
    assert standin.standin.left_event.wait(30), "the upstream's stream was not cancelled"
    assert standin.standin.left == left + 1


def test_v2_clients_generate_through_the_upstream(server, standin):
    """Triton's generate endpoints on the same model: `text_input` becomes
    the upstream's /completions prompt, its pieces `text_output`."""
    prompt = "a prompt asked over the V2 API"
    r = requests.post(f"http://{server.address}/v2/models/llm/generate_stream", timeout=10,
                      json={"text_input": prompt, "parameters": {"max_tokens": 4}})
    assert r.status_code == 200, r.text
    events = [line[len(b"data: "):] for line in r.content.splitlines() if line.startswith(b"data: ")]
    pieces = [json.loads(e) for e in events]
    assert "".join(p.get("text_output", "") for p in pieces) == "a prompt asked over"
    assert pieces[-1]["finish_reason"] == "length"
    assert standin.standin.bodies[-1]["max_tokens"] == 4


def test_events_are_counted_as_tokens(server):
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    assert 'wirespeed_time_to_first_token_seconds_count{model="llm"' in text
    assert 'nv_inference_request_success{model="llm"' in text


def test_replicas_share_streams_and_one_that_fails_is_probed_back(tmp_path):
    """Two replicas: requests go to both; one that stops is ejected and
    its requests go to the other; started again, the probe (`GET
    /v1/models`) admits it."""
    a, b = openai_standin.Running(), openai_standin.Running()
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "config.toml").write_text(
        f'backend = "upstream"\nurls = ["{a.base_url}", "{b.base_url}"]\nmodel = "{openai_standin.MODEL}"\n'
        "eject_after = 1\n")
    server = RunningServer(tmp_path, [])
    try:
        wait_until("the upstream model's readiness",
                   lambda: requests.get(f"http://{server.address}/v2/models/llm/ready", timeout=5).status_code == 200)
        with ours(server) as c:
            for _ in range(8):
                assert c.completions.create(model="llm", prompt="spread me").choices[0].text == "spread me"
            assert a.standin.bodies and b.standin.bodies
            port = b.port
            b.stop()
            before = len(a.standin.bodies)
            for _ in range(6):
                assert c.completions.create(model="llm", prompt="still answered").choices[0].text == "still answered"
            assert len(a.standin.bodies) == before + 6
            server.wait_for_log("ejecting the replica")
            b = openai_standin.Running(port)
            server.wait_for_log("the replica answers again; admitted")
            answered = len(b.standin.bodies)
            for _ in range(8):
                c.completions.create(model="llm", prompt="back")
            assert len(b.standin.bodies) > answered
    finally:
        server.stop()
        a.stop()
        b.stop()
