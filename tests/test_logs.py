"""`--log-format json` and `--access-log`: every log line a JSON object a
log collector can parse, and one access line per request, REST and gRPC,
with no request data in it."""

import json

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import RunningServer
from test_repository import ROW, copy_models


def access_lines(server):
    lines = [json.loads(line) for line in server.log]
    return [line for line in lines if line.get("target") == "wirespeed_server::access"]


def test_json_logs_with_an_access_line_per_request(tmp_path):
    server = RunningServer(copy_models(tmp_path / "repo", "titanic"),
                           extra_args=["--log-format", "json", "--access-log"])
    try:
        body = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12], "data": ROW}]}
        assert requests.post(f"http://{server.address}/v2/models/titanic/infer", json=body).status_code == 200
        assert requests.get(f"http://{server.address}/v2/models/nope").status_code == 404
        client = grpcclient.InferenceServerClient(server.grpc_address)
        inp = grpcclient.InferInput("features", [1, 12], "FP32")
        inp.set_data_from_numpy(np.array([ROW], dtype=np.float32))
        client.infer("titanic", [inp])
        with pytest.raises(InferenceServerException):
            client.infer("nope", [inp])
        server.wait_for_log("wirespeed_server::access", count=4)
        # Every line is one JSON object, the start-up lines too.
        started = [json.loads(line) for line in server.log if "loaded model" in line]
        assert started and started[0]["level"] == "INFO" and started[0]["model"] == "titanic", started
        rest = [(a["method"], a["path"], a["status"]) for a in access_lines(server) if a["protocol"] == "http"]
        assert rest == [("POST", "/v2/models/titanic/infer", 200), ("GET", "/v2/models/nope", 404)], rest
        grpc = [(a["path"], a["grpc_status"]) for a in access_lines(server) if a["protocol"] == "grpc"]
        assert grpc == [("/inference.GRPCInferenceService/ModelInfer", "0"),
                        ("/inference.GRPCInferenceService/ModelInfer", "5")], grpc
        assert all(isinstance(a["micros"], int) for a in access_lines(server))
        # The access log never carries the request's data.
        assert not any("0.275" in line or "features" in line for line in server.log
                       if "wirespeed_server::access" in line)
    finally:
        server.stop()


def test_no_access_lines_unless_asked(tmp_path):
    server = RunningServer(copy_models(tmp_path / "repo", "titanic"),
                           extra_args=["--log-format", "json", "--model-control-mode", "explicit"])
    try:
        assert requests.get(f"http://{server.address}/v2/health/live").status_code == 200
        assert requests.get(f"http://{server.address}/v2/models/nope").status_code == 404
        # A line the server writes after those requests were answered: once
        # it is read, any access line of theirs would have been too.
        assert requests.post(f"http://{server.address}/v2/repository/models/titanic/load").status_code == 200
        server.wait_for_log("serving the new load")
        assert access_lines(server) == []
    finally:
        server.stop()
