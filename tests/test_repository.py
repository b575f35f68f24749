"""Triton's model repository extension and `--model-control-mode`, through
tritonclient (HTTP and gRPC) as Triton's users call it, and a reload under
continuous load checked against the xgboost package's predictions.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost
from tritonclient.utils import InferenceServerException

from conftest import MODELS, RunningServer, load_summary, steady_load, wirespeed_binary

ROW = [0.0, 1.0, 3.0, 22.0 / 80, 1.0, 0.0, (7.25 - 50) / 100, 0.0, 1.0, 0.0, 0.0, 0.0]


def copy_models(root, *names):
    for name in names:
        shutil.copytree(MODELS / name, root / name)
    return root


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    root = copy_models(tmp_path_factory.mktemp("explicit"), "titanic", "identity_fp32")
    server = RunningServer(root, extra_args=["--model-control-mode", "explicit", "--load-model", "titanic"])
    yield server
    server.stop()


def titanic_input(module):
    inp = module.InferInput("features", [1, 12], "FP32")
    inp.set_data_from_numpy(np.array([ROW], dtype=np.float32))
    return inp


def fp32_input(module):
    inp = module.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.float32))
    return inp


def by_name(index):
    return {m["name"]: m for m in index}


def test_index_load_and_unload_over_http(explicit):
    client = httpclient.InferenceServerClient(explicit.address)
    index = by_name(client.get_model_repository_index())
    assert index["titanic"]["state"] == "READY" and index["titanic"]["version"] == "1"
    assert "state" not in index["identity_fp32"], index  # never loaded: the name alone, as Triton lists it
    assert [m["name"] for m in requests.post(f"http://{explicit.address}/v2/repository/index",
                                             json={"ready": True}).json()] == ["titanic"]
    assert not client.is_model_ready("identity_fp32")

    client.load_model("identity_fp32")
    assert client.is_model_ready("identity_fp32")
    answer = client.infer("identity_fp32", [fp32_input(httpclient)])
    np.testing.assert_array_equal(answer.as_numpy(answer.get_response()["outputs"][0]["name"]), [[1, 2, 3]])

    client.unload_model("identity_fp32")
    assert not client.is_model_ready("identity_fp32")
    entry = by_name(client.get_model_repository_index())["identity_fp32"]
    assert (entry["state"], entry["reason"]) == ("UNAVAILABLE", "unloaded")
    answer = requests.post(f"http://{explicit.address}/v2/models/identity_fp32/infer", json={
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]})
    assert answer.status_code == 404 and "identity_fp32" in answer.json()["error"], answer.text


def test_index_load_and_unload_over_grpc(explicit):
    client = grpcclient.InferenceServerClient(explicit.grpc_address)
    index = client.get_model_repository_index(as_json=True)["models"]
    assert by_name(index)["titanic"]["state"] == "READY"
    client.load_model("identity_fp32")
    assert client.is_model_ready("identity_fp32")
    client.infer("identity_fp32", [fp32_input(grpcclient)])
    client.unload_model("identity_fp32")
    with pytest.raises(InferenceServerException) as e:
        client.infer("identity_fp32", [fp32_input(grpcclient)])
    assert e.value.status() == "StatusCode.NOT_FOUND", e.value


def test_a_load_with_a_config_override_uses_it_and_a_plain_load_goes_back(explicit):
    client = httpclient.InferenceServerClient(explicit.address)
    config = {
        "backend": "identity", "version": "7",
        "inputs": [{"name": "INPUT0", "datatype": "INT64", "shape": [-1, -1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "INT64", "shape": [-1, -1]}],
    }
    client.load_model("identity_fp32", config=json.dumps(config))
    metadata = client.get_model_metadata("identity_fp32")
    assert metadata["versions"] == ["7"] and metadata["inputs"][0]["datatype"] == "INT64", metadata
    grpc = grpcclient.InferenceServerClient(explicit.grpc_address)
    config["version"] = "8"
    grpc.load_model("identity_fp32", config=json.dumps(config))
    assert client.get_model_metadata("identity_fp32")["versions"] == ["8"]
    client.load_model("identity_fp32")
    metadata = client.get_model_metadata("identity_fp32")
    assert metadata["inputs"][0]["datatype"] == "FP32", metadata
    client.unload_model("identity_fp32")


def test_a_broken_load_leaves_the_served_model_serving_and_says_why(explicit):
    client = httpclient.InferenceServerClient(explicit.address)
    before = client.infer("titanic", [titanic_input(httpclient)]).as_numpy("probability")
    with pytest.raises(InferenceServerException) as e:
        client.load_model("titanic", config=json.dumps({"backend": "xgboost"}))
    assert "failed to load 'titanic'" in str(e.value) and "model_file" in str(e.value), e.value
    after = client.infer("titanic", [titanic_input(httpclient)]).as_numpy("probability")
    np.testing.assert_array_equal(before, after)
    entry = by_name(client.get_model_repository_index())["titanic"]
    assert entry["state"] == "READY" and "latest one failed" in entry["reason"] and "model_file" in entry["reason"]
    explicit.wait_for_log("cannot load the model")
    client.load_model("titanic")
    assert "reason" not in by_name(client.get_model_repository_index())["titanic"]


@pytest.mark.parametrize("body, needle", [
    ({"parameters": {"file:1/model.json": "AAAA"}}, "needs 'config' too"),
    ({"parameters": {"config": "{}", "file:../escape": "AAAA"}}, "relative path inside"),
    ({"parameters": {"config": "{}", "file:1/model.json": "not base64!"}}, "is not base64"),
    ({"parameters": {"config": 3}}, "must be a string"),
    ({"parameters": {"colour": "red"}}, "unknown load parameter 'colour'"),
    ({"params": {}}, "unknown field"),
])
def test_bad_load_requests_are_named(explicit, body, needle):
    answer = requests.post(f"http://{explicit.address}/v2/repository/models/identity_fp32/load", json=body)
    assert answer.status_code == 400 and needle in answer.json()["error"], answer.text


def test_unknown_models_are_not_found(explicit):
    answer = requests.post(f"http://{explicit.address}/v2/repository/models/nope/load")
    assert answer.status_code == 404 and "nope" in answer.json()["error"]
    grpc = grpcclient.InferenceServerClient(explicit.grpc_address)
    with pytest.raises(InferenceServerException) as e:
        grpc.unload_model("nope")
    assert e.value.status() == "StatusCode.NOT_FOUND"


def test_mode_none_lists_models_and_refuses_loads(demo_server):
    client = httpclient.InferenceServerClient(demo_server.address)
    assert by_name(client.get_model_repository_index())["titanic"]["state"] == "READY"
    with pytest.raises(InferenceServerException) as e:
        client.load_model("titanic")
    assert "--model-control-mode explicit" in str(e.value), e.value
    grpc = grpcclient.InferenceServerClient(demo_server.grpc_address)
    with pytest.raises(InferenceServerException) as e:
        grpc.unload_model("titanic")
    assert "not allowed in model control mode none" in str(e.value)
    assert client.is_model_ready("titanic")


def test_load_model_needs_explicit_mode_and_a_folder():
    out = subprocess.run([str(wirespeed_binary()), "serve", "--models", str(MODELS), "--http", "127.0.0.1:0",
                          "--grpc", "off", "--load-model", "titanic"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--model-control-mode explicit" in out.stderr, out.stderr
    out = subprocess.run([str(wirespeed_binary()), "serve", "--models", str(MODELS), "--http", "127.0.0.1:0",
                          "--grpc", "off", "--model-control-mode", "explicit", "--load-model", "nope"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "'nope'" in out.stderr, out.stderr


def xgboost_probability(model_file):
    booster = xgboost.Booster(model_file=str(model_file))
    return float(booster.predict(xgboost.DMatrix(np.array([ROW], dtype=np.float32)))[0])


def replace_file(path, data):
    """Writes `data` beside `path`, then renames it over `path`, as
    deployment tools do."""
    staging = path.with_name(path.name + ".new")
    staging.write_bytes(data)
    os.replace(staging, path)


def test_poll_mode_serves_a_new_model_under_load_with_no_failed_request(tmp_path):
    """30 s of open-loop load at 200 requests/s; meanwhile a new model file
    is written, then a corrupt one: the new one is served, the corrupt one
    is refused (the log and the index say so) and the last good one keeps
    serving, and not one request fails."""
    root = copy_models(tmp_path / "repo", "titanic")
    model_file = root / "titanic" / "model.json"
    new_model = (MODELS / "titanic_large" / "model.json").read_bytes()
    old_p, new_p = xgboost_probability(model_file), xgboost_probability(MODELS / "titanic_large" / "model.json")
    assert abs(old_p - new_p) > 1e-4, "the two models must answer differently"
    server = RunningServer(root, extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "0.2"])
    try:
        client = httpclient.InferenceServerClient(server.address)

        def probability():
            return float(client.infer("titanic", [titanic_input(httpclient)]).as_numpy("probability")[0])

        assert probability() == pytest.approx(old_p, abs=1e-6)
        report = tmp_path / "load.json"
        load = steady_load(server, report, seconds=30)
        server.wait_for_log("loaded model", count=1)
        replace_file(model_file, new_model)
        server.wait_for_log("model files changed", count=1)
        server.wait_for_log("serving the new load", count=1)
        assert probability() == pytest.approx(new_p, abs=1e-6)

        replace_file(model_file, b'{"learner": 3')
        server.wait_for_log("cannot load the model", count=1)
        entry = by_name(client.get_model_repository_index())["titanic"]
        assert entry["state"] == "READY" and "latest one failed" in entry["reason"], entry
        assert probability() == pytest.approx(new_p, abs=1e-6)

        summary = load_summary(load, report)
        assert summary["answered"] > 4000 and summary["failed"] == 0, summary
    finally:
        server.stop()


def versioned_repository(root, policy):
    """Triton's layout: `versioned/config.toml` with the model files in
    numbered folders, version 1 the small Titanic model, version 2 the
    large one."""
    folder = root / "versioned"
    (folder / "1").mkdir(parents=True)
    (folder / "2").mkdir()
    shutil.copy(MODELS / "titanic" / "model.json", folder / "1" / "model.json")
    shutil.copy(MODELS / "titanic_large" / "model.json", folder / "2" / "model.json")
    write_versioned_config(folder, policy)
    return root


def write_versioned_config(folder, policy):
    config = (MODELS / "titanic" / "config.toml").read_text().replace('version = "1"\n', "")
    (folder / "config.toml").write_text(f"{policy}\n{config}")


def test_version_folders_are_served_by_their_policy_and_reloaded(tmp_path):
    root = versioned_repository(tmp_path / "repo", "version_policy = { all = {} }")
    p1 = xgboost_probability(MODELS / "titanic" / "model.json")
    p2 = xgboost_probability(MODELS / "titanic_large" / "model.json")
    server = RunningServer(root, extra_args=["--model-control-mode", "explicit", "--load-model", "*"])
    try:
        http = httpclient.InferenceServerClient(server.address)
        grpc = grpcclient.InferenceServerClient(server.grpc_address)

        def probability(client, module, version=""):
            answer = client.infer("versioned", [titanic_input(module)], model_version=version)
            return float(answer.as_numpy("probability")[0])

        for client, module in [(http, httpclient), (grpc, grpcclient)]:
            assert probability(client, module, "1") == pytest.approx(p1, abs=1e-6)
            assert probability(client, module, "2") == pytest.approx(p2, abs=1e-6)
            assert probability(client, module) == pytest.approx(p2, abs=1e-6)  # the latest
            assert client.is_model_ready("versioned", "1") and client.is_model_ready("versioned", "2")
        assert http.get_model_metadata("versioned")["versions"] == ["1", "2"]
        assert list(grpc.get_model_metadata("versioned").versions) == ["1", "2"]
        assert http.get_model_metadata("versioned", "1")["versions"] == ["1"]
        assert http.get_model_config("versioned")["version_policy"] == {"all": {}}
        assert grpc.get_model_config("versioned", as_json=True)["config"]["version_policy"] == {"all": {}}
        index = [(m["name"], m.get("version"), m.get("state")) for m in http.get_model_repository_index()]
        assert index == [("versioned", "1", "READY"), ("versioned", "2", "READY")], index
        stats = http.get_inference_statistics("versioned")["model_stats"]
        assert [(s["version"], s["inference_count"]) for s in stats] == [("1", 2), ("2", 4)], stats
        status = requests.get(f"http://{server.address}/v1/models/versioned").json()
        assert [v["version"] for v in status["model_version_status"]] == ["2", "1"], status

        # A reload with the default policy serves the latest only; version 1 is gone.
        write_versioned_config(root / "versioned", "")
        http.load_model("versioned")
        assert http.get_model_metadata("versioned")["versions"] == ["2"]
        assert http.get_model_config("versioned")["version_policy"] == {"latest": {"num_versions": 1}}
        assert not http.is_model_ready("versioned", "1")
        with pytest.raises(InferenceServerException) as e:
            probability(grpc, grpcclient, "1")
        assert e.value.status() == "StatusCode.NOT_FOUND" and "version 1 is not found" in str(e.value), e.value

        # A policy naming a version with no folder is refused; version 2 stays served.
        write_versioned_config(root / "versioned", "version_policy = { specific = { versions = [1, 3] } }")
        with pytest.raises(InferenceServerException) as e:
            http.load_model("versioned")
        assert "version 3 with no folder" in str(e.value), e.value
        assert probability(http, httpclient) == pytest.approx(p2, abs=1e-6)
    finally:
        server.stop()
