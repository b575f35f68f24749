"""The OpenAI API, asked with the official `openai` package (sync and
async, streaming and not), unmodified.

- Embeddings: a BERT-style encoder built here with onnx.helper (random
  weights) and a WordPiece tokenizer trained here with the `tokenizers`
  package (nothing downloaded); every vector equals the same texts run
  through `tokenizers` and onnxruntime in Python, mean-pooled and
  normalised, as sentence-transformers does.
- Chat and completions: a decoupled Python model in the shape of Triton's
  vLLM models (`text_input` in, `text_output` streamed), which streams its
  prompt back, so the prompt the chat template made can be compared with
  the one `jinja2` makes from the same template as Hugging Face's
  `apply_chat_template` renders it; usage counted with the `tokenizers`
  package.
"""

import asyncio
import json
import os

import jinja2
import jinja2.sandbox
import numpy as np
import onnx
import onnxruntime as ort
import openai
import pytest
import requests
from onnx import TensorProto, helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from conftest import ROOT, RunningServer

os.environ.setdefault("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "wirespeed serves models at the speed of the wire",
    "a tokenizer splits text into word pieces",
    "embeddings map sentences to vectors of numbers",
    "streaming answers arrive one token at a time",
] * 20

HIDDEN = 32


def train_tokenizer(path):
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.save(str(path))
    return tokenizer


def encoder(vocab):
    """Embeddings (word + token type), LayerNormalization, a dense layer
    with tanh: [rows, tokens] ids in, [rows, tokens, HIDDEN] out."""
    rng = np.random.default_rng(0)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["rows", "tokens"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["rows", "tokens"])
    types = helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["rows", "tokens"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["rows", "tokens", HIDDEN])
    init = lambda name, a: helper.make_tensor(name, TensorProto.FLOAT, a.shape, a.ravel())  # noqa: E731
    weights = [
        init("word", rng.normal(size=(vocab, HIDDEN)).astype(np.float32)),
        init("type", rng.normal(size=(2, HIDDEN)).astype(np.float32)),
        init("gamma", np.ones(HIDDEN, np.float32)),
        init("beta", np.zeros(HIDDEN, np.float32)),
        init("dense", (rng.normal(size=(HIDDEN, HIDDEN)) / 4).astype(np.float32)),
        init("bias", rng.normal(size=HIDDEN).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["w"]),
        helper.make_node("Gather", ["type", "token_type_ids"], ["t"]),
        helper.make_node("Add", ["w", "t"], ["e"]),
        helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-12),
        helper.make_node("MatMul", ["n", "dense"], ["d"]),
        helper.make_node("Add", ["d", "bias"], ["b"]),
        helper.make_node("Tanh", ["b"], ["last_hidden_state"]),
    ]
    # The mask is an input the encoder takes and (here) does not use, as
    # BERT's ONNX exports take it.
    nodes.append(helper.make_node("Cast", ["attention_mask"], ["unused"], to=TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "encoder", [ids, mask, types], [out], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


# A ChatML template, with what Hugging Face's templates use: a system
# default, Python's string methods, raise_exception, the tools.
CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set rest = messages[1:] %}{% else %}{% set system = 'You are a helpful assistant.' %}"
    "{% set rest = messages %}{% endif %}"
    "<|im_start|>system\n{{ system | trim }}"
    "{% if tools %}\n# Tools\n{% for tool in tools %}{{ tool['function']['name'] }}: "
    "{{ tool['function']['description'] }}\n{% endfor %}{% endif %}<|im_end|>\n"
    "{% for message in rest %}"
    "{% if message['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('Only user and assistant roles are supported after the system message') }}"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'].strip() }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def hf_render(messages, tools=None):
    """The prompt as transformers' apply_chat_template renders it: jinja2's
    sandbox with trim_blocks and lstrip_blocks, raise_exception."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, tools=tools, add_generation_prompt=True,
                                                 bos_token="", eos_token="<|im_end|>")


LLM_CONFIG = """
name: "echo-llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "finish_reason" data_type: TYPE_STRING dims: [ -1 ] }
]
"""

# Streams its prompt back, 8 characters a piece, up to max_tokens pieces
# (then says "length"), 50 ms apart at temperature 0.5; stops when its
# client leaves, and says so.
LLM = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
            prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            sampling = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            sampling = json.loads(sampling.as_numpy()[0]) if sampling is not None else {}
            if "top_k" in sampling:
                prompt = "top_k=%s %s" % (sampling["top_k"], prompt)
            limit = sampling.get("max_tokens", 10**9)
            pieces = [prompt[i:i + 8] for i in range(0, len(prompt), 8)]
            for i, piece in enumerate(pieces):
                if request.is_cancelled():
                    print("echo-llm cancelled after %d pieces" % i, flush=True)
                    break
                if i == limit:
                    sender.send(pb_utils.InferenceResponse(output_tensors=[
                        pb_utils.Tensor("text_output", np.array([b""], dtype=np.object_)),
                        pb_utils.Tensor("finish_reason", np.array([b"length"], dtype=np.object_))]))
                    break
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))]))
                if sampling.get("temperature") == 0.5:
                    import time
                    time.sleep(0.05)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai")
    embed = root / "embedder"
    embed.mkdir()
    tokenizer = train_tokenizer(embed / "tokenizer.json")
    onnx.save(encoder(tokenizer.get_vocab_size()), embed / "model.onnx")
    (embed / "config.toml").write_text('backend = "onnx"\n[embedding]\npooling = "mean"\ndimensions = [16]\n')
    llm = root / "echo-llm"
    (llm / "1").mkdir(parents=True)
    (llm / "config.pbtxt").write_text(LLM_CONFIG)
    (llm / "1" / "model.py").write_text(LLM)
    train_tokenizer(llm / "1" / "tokenizer.json")
    (llm / "1" / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>", "bos_token": None}))
    # The same model with its tokenizer's files beside config.pbtxt, as
    # Triton's LLM repositories keep them, not in the version folder.
    beside = root / "echo-beside"
    (beside / "1").mkdir(parents=True)
    (beside / "config.pbtxt").write_text(LLM_CONFIG.replace('"echo-llm"', '"echo-beside"'))
    (beside / "1" / "model.py").write_text(LLM)
    (beside / "tokenizer.json").write_bytes((llm / "1" / "tokenizer.json").read_bytes())
    (beside / "tokenizer_config.json").write_text((llm / "1" / "tokenizer_config.json").read_text())
    return root


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository, ["--metrics", "127.0.0.1:0"])
    yield running
    running.stop()


def client(server):
    return openai.OpenAI(base_url=f"http://{server.address}/v1", api_key="none")


def reference_embeddings(repository, texts, dimensions=None):
    tokenizer = Tokenizer.from_file(str(repository / "embedder" / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }
    hidden = ort.InferenceSession(str(repository / "embedder" / "model.onnx")).run(None, feed)[0]
    mask = feed["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    if dimensions:
        pooled = pooled[:, :dimensions]
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled, int(feed["attention_mask"].sum())


TEXTS = ["the quick brown fox", "wirespeed serves models", "word pieces and vectors of numbers", "a"]


def test_embeddings_equal_tokenizers_and_onnxruntime(server, repository):
    want, tokens = reference_embeddings(repository, TEXTS)
    with client(server) as c:
        # The SDK asks base64 by default and decodes it itself.
        answer = c.embeddings.create(model="embedder", input=TEXTS)
        got = np.array([d.embedding for d in answer.data], np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert [d.index for d in answer.data] == [0, 1, 2, 3]
        assert answer.usage.prompt_tokens == tokens == answer.usage.total_tokens
        floats = c.embeddings.create(model="embedder", input=TEXTS[0], encoding_format="float")
        np.testing.assert_allclose(floats.data[0].embedding, want[0], rtol=1e-4, atol=1e-5)
        short = c.embeddings.create(model="embedder", input=TEXTS, dimensions=16, encoding_format="float")
        np.testing.assert_allclose(np.array([d.embedding for d in short.data]),
                                   reference_embeddings(repository, TEXTS, 16)[0], rtol=1e-4, atol=1e-5)
        with pytest.raises(openai.BadRequestError) as refused:
            c.embeddings.create(model="embedder", input="x", dimensions=7)
        assert "dimensions 7" in str(refused.value) and "32, 16" in str(refused.value)


def test_embeddings_async(server, repository):
    want, _ = reference_embeddings(repository, TEXTS[:2])

    async def ask():
        async with openai.AsyncOpenAI(base_url=f"http://{server.address}/v1", api_key="none") as c:
            return await asyncio.gather(*(c.embeddings.create(model="embedder", input=t) for t in TEXTS[:2]))

    answers = asyncio.run(ask())
    got = np.array([a.data[0].embedding for a in answers], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


MESSAGES = [
    {"role": "system", "content": "  Answer briefly.  "},
    {"role": "user", "content": "What is the speed of the wire?"},
    {"role": "assistant", "content": "Fast."},
    {"role": "user", "content": " And a tokenizer? "},
]


def usage_tokens(repository, text):
    tokenizer = Tokenizer.from_file(str(repository / "echo-llm" / "1" / "tokenizer.json"))
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_chat_renders_the_template_as_transformers_does(server, repository):
    prompt = hf_render(MESSAGES)
    with client(server) as c:
        answer = c.chat.completions.create(model="echo-llm", messages=MESSAGES)
        assert answer.choices[0].message.content == prompt
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].finish_reason == "stop"
        assert answer.object == "chat.completion" and answer.model == "echo-llm"
        assert answer.usage.prompt_tokens == usage_tokens(repository, prompt)
        assert answer.usage.completion_tokens == usage_tokens(repository, prompt)
        tools = [{"type": "function", "function": {"name": "lookup", "description": "Finds a word",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        with_tools = c.chat.completions.create(model="echo-llm", messages=MESSAGES, tools=tools)
        assert with_tools.choices[0].message.content == hf_render(MESSAGES, tools)
        cut = c.chat.completions.create(model="echo-llm", messages=MESSAGES, max_tokens=3)
        assert cut.choices[0].message.content == prompt[:24] and cut.choices[0].finish_reason == "length"
        # The template's own refusal is the client's mistake.
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="echo-llm", messages=[
                {"role": "system", "content": "s"}, {"role": "tool", "content": "t", "tool_call_id": "1"}])
        assert "Only user and assistant roles" in str(refused.value)


def test_a_chat_template_beside_config_pbtxt_is_found(server, repository):
    """`tokenizer_config.json` and `tokenizer.json` in the model's folder,
    beside `config.pbtxt`, with the code in `1/`: the chat renders as
    transformers renders it, and usage counts with that tokenizer."""
    prompt = hf_render(MESSAGES)
    with client(server) as c:
        answer = c.chat.completions.create(model="echo-beside", messages=MESSAGES)
    assert answer.choices[0].message.content == prompt
    assert answer.usage.prompt_tokens == usage_tokens(repository, prompt)


def test_chat_streams_each_piece_as_it_comes(server, repository):
    prompt = hf_render(MESSAGES)
    with client(server) as c:
        stream = c.chat.completions.create(model="echo-llm", messages=MESSAGES, stream=True,
                                           stream_options={"include_usage": True})
        chunks = list(stream)
    content = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert "".join(content) == prompt
    assert len(content) == (len(prompt) + 7) // 8
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == usage_tokens(repository, prompt)
    assert all(ch.object == "chat.completion.chunk" and ch.id == chunks[0].id for ch in chunks)

    async def ask():
        async with openai.AsyncOpenAI(base_url=f"http://{server.address}/v1", api_key="none") as ac:
            stream = await ac.chat.completions.create(model="echo-llm", messages=MESSAGES, stream=True)
            return [ch.choices[0].delta.content async for ch in stream if ch.choices and ch.choices[0].delta.content]

    assert "".join(asyncio.run(ask())) == prompt


def histogram_count(server, family, model):
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{family}_count{{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_token_latencies_are_histograms(server):
    """Time to first token and inter-token latency, as the Gateway API
    Inference Extension and KEDA read a model server's."""
    first = histogram_count(server, "wirespeed_time_to_first_token_seconds", "echo-llm")
    between = histogram_count(server, "wirespeed_inter_token_latency_seconds", "echo-llm")
    prompt = hf_render(MESSAGES)
    with client(server) as c:
        pieces = sum(1 for ch in c.chat.completions.create(model="echo-llm", messages=MESSAGES, stream=True)
                     if ch.choices and ch.choices[0].delta.content)
    assert pieces == (len(prompt) + 7) // 8
    assert histogram_count(server, "wirespeed_time_to_first_token_seconds", "echo-llm") == first + 1
    assert histogram_count(server, "wirespeed_inter_token_latency_seconds", "echo-llm") >= between + pieces - 1


def test_completions_stream_and_not(server):
    with client(server) as c:
        answer = c.completions.create(model="echo-llm", prompt="Once upon a time, there was a tokenizer.")
        assert answer.choices[0].text == "Once upon a time, there was a tokenizer."
        assert answer.object == "text_completion"
        pieces = [ch.choices[0].text for ch in c.completions.create(
            model="echo-llm", prompt="streamed prompt text", stream=True) if ch.choices]
        assert "".join(pieces) == "streamed prompt text"


def test_a_client_that_leaves_cancels_the_model(server):
    body = {"model": "echo-llm", "stream": True, "messages": [{"role": "user", "content": "x" * 4000}],
            "temperature": 0.5}
    with requests.post(f"http://{server.address}/v1/chat/completions", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        assert next(lines).startswith(b"data: ")
    server.wait_for_log("echo-llm cancelled after")


def test_fields_beyond_openais_reach_the_model_as_vllm_takes_them(server):
    # The SDK's extra_body (vLLM's top_k) goes to the model with the
    # sampling fields, as vLLM and Triton's vLLM backend take it.
    with client(server) as c:
        answer = c.chat.completions.create(model="echo-llm", messages=MESSAGES, extra_body={"top_k": 20})
        assert answer.choices[0].message.content.startswith("top_k=20 "), answer
        plain = c.chat.completions.create(model="echo-llm", messages=MESSAGES)
        assert answer.choices[0].message.content == "top_k=20 " + plain.choices[0].message.content


def test_a_chat_is_checked_by_the_models_template_in_openais_words(server):
    with client(server) as c:
        with pytest.raises(openai.BadRequestError) as role:
            c.chat.completions.create(model="echo-llm", messages=[{"role": "wizard", "content": "x"}])
        assert role.value.param == "messages"
        assert "messages[0] has role \"wizard\"" in str(role.value), role.value
        with pytest.raises(openai.BadRequestError) as empty:
            c.chat.completions.create(model="echo-llm", messages=[])
        assert empty.value.param == "messages" and "'messages' is empty" in str(empty.value)
        with pytest.raises(openai.BadRequestError) as missing:
            c.completions.create(model="echo-llm", prompt="x", extra_body={"messages": MESSAGES})
        assert missing.value.param == "messages"


def test_openai_errors_in_openais_shape(server):
    with client(server) as c:
        with pytest.raises(openai.NotFoundError) as missing:
            c.chat.completions.create(model="nosuch", messages=MESSAGES)
        assert missing.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as n:
            c.chat.completions.create(model="echo-llm", messages=MESSAGES, n=2)
        assert n.value.param == "n"
        with pytest.raises(openai.BadRequestError) as not_chat:
            c.chat.completions.create(model="embedder", messages=MESSAGES)
        assert "chat template" in str(not_chat.value)
        with pytest.raises(openai.BadRequestError):
            c.embeddings.create(model="echo-llm", input="x")
        with pytest.raises(openai.BadRequestError) as temperature:
            c.chat.completions.create(model="echo-llm", messages=MESSAGES, temperature=3)
        assert temperature.value.param == "temperature"
    r = requests.post(f"http://{server.address}/v1/embeddings", data=b"{not json", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text


def test_models_list_serves_openai_and_kserve(server):
    with client(server) as c:
        names = {m.id for m in c.models.list()}
        assert {"embedder", "echo-llm"} <= names
        model = c.models.retrieve("embedder")
        assert model.id == "embedder" and model.object == "model"
    listing = requests.get(f"http://{server.address}/v1/models", timeout=10).json()
    assert set(listing["models"]) == names


def test_keys_are_checked_in_openais_shape(repository, tmp_path):
    token = tmp_path / "token"
    token.write_text("sk-wirespeed\n")
    server = RunningServer(repository, ["--auth-token-file", str(token)])
    try:
        with pytest.raises(openai.AuthenticationError):
            with client(server) as c:
                c.embeddings.create(model="embedder", input="x")
        with openai.OpenAI(base_url=f"http://{server.address}/v1", api_key="sk-wirespeed") as c:
            assert len(c.embeddings.create(model="embedder", input="x").data) == 1
    finally:
        server.stop()
