"""Triton's model configuration, statistics and classification extensions
and its reserved parameters, through tritonclient http and grpc,
unmodified. References: the model's config.toml (read with tomllib), the
requests this test sent, and numpy's sort for the top classes."""

import shutil
import tomllib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import MODELS, RunningServer

LABELS = ["cat", "dog", "emu", "fox", "gnu", "hen"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(MODELS / "titanic", root / "titanic")
    shutil.copytree(MODELS / "identity_fp32", root / "scores")
    config = (root / "scores" / "config.toml").read_text()
    (root / "scores" / "config.toml").write_text(config.rstrip() + '\nlabels = "labels.txt"\n')
    (root / "scores" / "labels.txt").write_text("\n".join(LABELS) + "\n")
    shutil.copytree(MODELS / "identity_fp32", root / "unlabelled")
    shutil.copytree(MODELS / "identity_int64", root / "counts")
    running = RunningServer(root, extra_args=["--compute-threads", "2"])
    yield running
    running.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request):
    return request.param


def client_for(server, protocol):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.address), httpclient
    return grpcclient.InferenceServerClient(server.grpc_address), grpcclient


def config_of(client, protocol, model):
    if protocol == "http":
        return client.get_model_config(model)
    return client.get_model_config(model, as_json=True)["config"]


def test_the_model_configuration_is_the_config_toml(server, protocol):
    client, _ = client_for(server, protocol)
    reference = tomllib.loads((MODELS / "titanic" / "config.toml").read_text())
    config = config_of(client, protocol, "titanic")
    assert config["name"] == "titanic"
    assert config["backend"] == reference["backend"]
    assert int(config.get("max_batch_size", 0)) == 0
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        (t["name"], "TYPE_" + t["datatype"], t["shape"]) for t in reference["inputs"]
    ]
    assert [(o["name"], o["data_type"], [int(d) for d in o["dims"]]) for o in config["output"]] == [
        (t["name"], "TYPE_" + t["datatype"], t["shape"]) for t in reference["outputs"]
    ]
    [group] = config["instance_group"]
    assert group["kind"] == "KIND_CPU" and int(group["count"]) == 2
    labelled = config_of(client, protocol, "scores")
    assert labelled["output"][0]["label_filename"] == "labels.txt"
    extensions = client.get_server_metadata(**({} if protocol == "http" else {"as_json": True}))["extensions"]
    for extension in ["binary_tensor_data", "classification", "model_configuration", "statistics", "system_shared_memory",
                      "schedule_policy", "parameters"]:
        assert extension in extensions


def test_an_unknown_model_has_no_configuration(server, protocol):
    client, _ = client_for(server, protocol)
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        client.get_model_config("nope")


def stats_of(client, protocol, model=""):
    if protocol == "http":
        return client.get_inference_statistics(model)["model_stats"]
    return client.get_inference_statistics(model, as_json=True)["model_stats"]


def test_statistics_count_the_requests_sent(server, protocol):
    # Each protocol uses a model of its own, so the counts are this test's.
    model = "unlabelled" if protocol == "http" else "counts"
    client, module = client_for(server, protocol)
    datatype, dtype = ("FP32", np.float32) if model == "unlabelled" else ("INT64", np.int64)
    before = stats_of(client, protocol, model)[0]
    assert before["name"] == model and before["version"] == "1"
    successes, failures = 5, 3
    for i in range(successes):
        data = np.arange(6, dtype=dtype).reshape(1, 6) + i
        inp = module.InferInput("INPUT0", [1, 6], datatype)
        inp.set_data_from_numpy(data)
        client.infer(model, [inp])
    for _ in range(failures):
        wrong = module.InferInput("WRONG", [1, 1], datatype)
        wrong.set_data_from_numpy(np.zeros((1, 1), dtype=dtype))
        with pytest.raises(InferenceServerException):
            client.infer(model, [wrong])
    after = stats_of(client, protocol, model)[0]
    count = lambda s, k: int(s["inference_stats"][k].get("count", 0))
    ns = lambda s, k: int(s["inference_stats"][k].get("ns", 0))
    assert count(after, "success") - count(before, "success") == successes
    assert count(after, "fail") - count(before, "fail") == failures
    assert int(after.get("inference_count", 0)) - int(before.get("inference_count", 0)) == successes
    assert int(after.get("execution_count", 0)) - int(before.get("execution_count", 0)) == successes
    assert count(after, "compute_infer") == count(after, "success")
    assert ns(after, "success") >= ns(after, "compute_infer") > 0
    assert int(after["last_inference"]) > 0
    every = {s["name"] for s in stats_of(client, protocol)}
    assert {"titanic", "scores", "unlabelled", "counts"} <= every


def classify(client, module, model, data, count):
    inp = module.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    out = module.InferRequestedOutput("OUTPUT0", class_count=count)
    result = client.infer(model, [inp], outputs=[out])
    return result.as_numpy("OUTPUT0")


def expected_classes(row, count, labels=None):
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:count]
    return [
        (float(row[i]), i) + ((labels[i],) if labels else ()) for i in order
    ]


def parse(cell):
    parts = (cell.decode() if isinstance(cell, bytes) else cell).split(":")
    return (float(parts[0]), int(parts[1])) + tuple(parts[2:])


@pytest.mark.parametrize("binary", [True, False])
def test_class_count_gives_the_top_classes(server, protocol, binary):
    client, module = client_for(server, protocol)
    rng = np.random.default_rng(7)
    data = rng.random((3, 6), dtype=np.float32)
    for model, labels in [("scores", LABELS), ("unlabelled", None)]:
        inp = module.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        if protocol == "http":
            out = module.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=2)
        else:
            out = module.InferRequestedOutput("OUTPUT0", class_count=2)
        got = client.infer(model, [inp], outputs=[out]).as_numpy("OUTPUT0")
        assert got.shape == (3, 2)
        for row, cells in zip(data, got):
            parsed = [parse(c) for c in cells]
            want = expected_classes(row, 2, labels)
            assert [p[1:] for p in parsed] == [w[1:] for w in want]
            assert [p[0] for p in parsed] == pytest.approx([w[0] for w in want], abs=1e-6)


def test_class_count_past_the_classes_gives_them_all(server):
    client, module = client_for(server, "http")
    data = np.array([[0.5, 0.25, 0.75]], dtype=np.float32)
    got = classify(client, module, "unlabelled", data, 10)
    assert [parse(c) for c in got[0]] == [(0.75, 2), (0.5, 0), (0.25, 1)]


@pytest.mark.parametrize("parameter,value", [("sequence_id", 7), ("sequence_start", True)])
def test_reserved_parameters_are_refused_by_name(server, protocol, parameter, value):
    client, module = client_for(server, protocol)
    inp = module.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
    kwargs = {
        "sequence_id": {"sequence_id": value},
        "sequence_start": {"sequence_id": 1, "sequence_start": value},
    }[parameter]
    with pytest.raises(InferenceServerException, match="sequence_id" if parameter == "sequence_start" else parameter):
        client.infer("unlabelled", [inp], **kwargs)
    # Left at their defaults, as tritonclient sends them, they are fine.
    client.infer("unlabelled", [inp])


def test_priority_and_timeout_are_taken(server, protocol):
    """Triton's `priority` and `timeout` are the scheduler's (test_batching.py
    shows them honoured): a model without priority levels takes any
    priority at its default level, and a request that starts at once is
    within any timeout."""
    client, module = client_for(server, protocol)
    inp = module.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.array([[0.25, 0.5]], dtype=np.float32))
    result = client.infer("unlabelled", [inp], priority=2, timeout=10_000_000)
    assert result.as_numpy("OUTPUT0").tolist() == [[0.25, 0.5]]


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda c: c.get_trace_settings(), "trace settings"),
        (lambda c: c.get_log_settings(), "log settings"),
    ],
    ids=["trace", "log"],
)
def test_endpoints_not_served_say_what_they_are(server, protocol, call, needle):
    client, _ = client_for(server, protocol)
    with pytest.raises(InferenceServerException) as e:
        call(client)
    assert needle in str(e.value), str(e.value)
    status = e.value.status()
    assert status in ("501", "StatusCode.UNIMPLEMENTED", 501), status
