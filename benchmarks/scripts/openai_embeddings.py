#!/usr/bin/env python3
"""OpenAI embeddings: wirespeed against a Python server of the shape
Triton's OpenAI frontend and Infinity use (FastAPI + uvicorn, the
`tokenizers` package, onnxruntime, numpy pooling), the same encoder and
tokenizer (tests/test_openai.py builds them: a BERT-style ONNX encoder
with random weights, a WordPiece tokenizer trained here), on one machine,
rounds interleaved.

Four requests: 1 text and 32 texts, each as `float` and `base64`. p50
from `wrk -t1 -c1` (5 s), throughput from `wrk -t1 -c16` (10 s); the
Python server runs one uvicorn worker, as its single-process deployments
do (a second would take the second core wirespeed also has).

Usage (from the repository root, after `cargo build --release -p wirespeed`):
  benchmarks/scripts/openai_embeddings.py [ROUNDS]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import free_port, wait_ready, wrk

ROOT = Path(__file__).resolve().parents[2]
W = Path(os.environ.get("W", ROOT / "target" / "release" / "wirespeed"))
PYTHON = os.environ.get("WIRESPEED_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

# The Python server: FastAPI, tokenizers, onnxruntime, numpy.
SERVER = r'''
import base64, os
import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from pydantic import BaseModel
from tokenizers import Tokenizer
from typing import List, Optional, Union

folder = os.environ["EMBEDDER"]
tokenizer = Tokenizer.from_file(folder + "/tokenizer.json")
tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
session = ort.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
app = FastAPI()


class Request(BaseModel):
    model: str
    input: Union[str, List[str]]
    encoding_format: Optional[str] = "float"
    dimensions: Optional[int] = None


@app.post("/v1/embeddings")
def embeddings(request: Request):
    texts = [request.input] if isinstance(request.input, str) else request.input
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    types = np.array([e.type_ids for e in encodings], np.int64)
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
    m = mask[..., None].astype(np.float32)
    pooled = (hidden * m).sum(1) / m.sum(1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    if request.encoding_format == "base64":
        data = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in pooled]
    else:
        data = pooled.tolist()
    tokens = int(mask.sum())
    return {"object": "list", "model": request.model,
            "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
'''








def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sys.path.insert(0, str(ROOT / "tests"))
    from test_openai import CORPUS, encoder, train_tokenizer  # noqa: E402

    work = Path(tempfile.mkdtemp(prefix="openai-embeddings-"))
    folder = work / "models" / "embedder"
    folder.mkdir(parents=True)
    tokenizer = train_tokenizer(folder / "tokenizer.json")
    import onnx
    onnx.save(encoder(tokenizer.get_vocab_size()), folder / "model.onnx")
    (folder / "config.toml").write_text('backend = "onnx"\n[embedding]\npooling = "mean"\n')
    (work / "server.py").write_text(SERVER)
    bodies = {}
    for texts in (1, 32):
        for fmt in ("float", "base64"):
            body = work / f"{texts}-{fmt}.json"
            inputs = [CORPUS[i % 5] for i in range(texts)]
            body.write_text(json.dumps({"model": "embedder", "input": inputs if texts > 1 else inputs[0],
                                        "encoding_format": fmt}))
            bodies[(texts, fmt)] = body
    ours_port, theirs_port = free_port(), free_port()
    ours = subprocess.Popen([str(W), "serve", "--models", str(work / "models"), "--http",
                             f"127.0.0.1:{ours_port}", "--grpc", "off", "--log-level", "warn"])
    theirs = subprocess.Popen([PYTHON, "-m", "uvicorn", "--app-dir", str(work), "--port", str(theirs_port),
                               "--log-level", "warning", "--no-access-log", "server:app"],
                              env=dict(os.environ, PYTHONPATH=str(work), EMBEDDER=str(folder)), cwd=work,
                              stdin=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{ours_port}/v2/health/ready")
        wait_ready(f"http://127.0.0.1:{theirs_port}/docs")
        results = {}
        for r in range(rounds):
            for key, body in bodies.items():
                for name, port in (("wirespeed", ours_port), ("python", theirs_port)):
                    url = f"http://127.0.0.1:{port}"
                    _, p50 = wrk(url, "/v1/embeddings", body, 1, 5)
                    rps, _ = wrk(url, "/v1/embeddings", body, 16, 10)
                    results.setdefault((key, name), []).append((p50, rps))
                    print(f"round {r + 1} {key[0]} text(s) {key[1]} {name}: p50 {p50:.3f} ms, {rps:,.0f} req/s",
                          flush=True)
        print()
        print("| texts | format | wirespeed p50 | Python p50 | wirespeed req/s | Python req/s | ratio |")
        print("|---|---|---|---|---|---|---|")
        for key in bodies:
            o, t = results[(key, "wirespeed")], results[(key, "python")]
            op, tp = statistics.median(p for p, _ in o), statistics.median(p for p, _ in t)
            orps, trps = statistics.median(r for _, r in o), statistics.median(r for _, r in t)
            print(f"| {key[0]} | {key[1]} | {op:.3f} ms | {tp:.3f} ms | {orps:,.0f} | {trps:,.0f} | "
                  f"{orps / trps:.1f}x |")
    finally:
        for p in (ours, theirs):
            p.terminate()
            p.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
