"""TF Serving's gRPC API (`tensorflow.serving.PredictionService` and
`ModelService`), called by a grpcio client on TF Serving's published
messages (`tfserving_protos.py`: the tensorflow-serving-api wheel's
descriptors) and with grpcurl through server reflection: Predict
with typed values and with `tensor_content` answers what the V2 REST API
answers, in the typed fields as TF Serving does (`float_val`, ...), or in
`tensor_content` with `--tf-tensor-content`; GetModelMetadata and GetModelStatus describe the model;
FP32, INT64, BOOL and BYTES cross both ways; hostile tensors get
INVALID_ARGUMENT."""

import base64
import json
import subprocess

import numpy as np
import pytest
import requests

from conftest import MODELS, RunningServer
from test_grpc import grpcurl

# The first Titanic passenger of the test set's rows, as the model's features.
FEATURES = [3, 1, 22, 1, 0, 7.25, 0, 0, 1, 0, 0, 1]


@pytest.fixture(scope="module")
def server():
    running = RunningServer(MODELS)
    yield running
    running.stop()


def call(server, method, body):
    out = subprocess.run(
        [grpcurl(), "-plaintext", "-d", json.dumps(body), server.grpc_address, method],
        capture_output=True, text=True, timeout=30,
    )
    return out.returncode, out.stdout, out.stderr


def floats(tensor):
    assert tensor["dtype"] == "DT_FLOAT" and "tensorContent" not in tensor, tensor
    return np.array(tensor["floatVal"], dtype=np.float32)


def rest_outputs(server, rows):
    r = requests.post(f"http://{server.address}/v2/models/titanic/infer", json={"inputs": [
        {"name": "features", "datatype": "FP32", "shape": [len(rows), 12], "data": rows}]})
    assert r.status_code == 200, r.text
    return {o["name"]: np.array(o["data"], dtype=np.float32) for o in r.json()["outputs"]}


def test_predict_with_typed_values_and_with_tensor_content_answers_as_rest(server):
    rows = [FEATURES, [1, 0, 38, 1, 0, 71.28, 1, 0, 0, 1, 0, 0]]
    expected = rest_outputs(server, rows)
    flat = np.array(rows, dtype=np.float32).reshape(-1)
    shape = {"dim": [{"size": 2}, {"size": 12}]}
    for tensor in (
        {"dtype": "DT_FLOAT", "tensor_shape": shape, "float_val": flat.tolist()},
        {"dtype": "DT_FLOAT", "tensor_shape": shape,
         "tensor_content": base64.b64encode(flat.astype("<f4").tobytes()).decode()},
    ):
        code, out, err = call(server, "tensorflow.serving.PredictionService/Predict",
                              {"model_spec": {"name": "titanic"}, "inputs": {"features": tensor}})
        assert code == 0, err
        answer = json.loads(out)
        assert answer["modelSpec"] == {"name": "titanic", "version": "1", "signatureName": "serving_default"}
        for name, values in expected.items():
            np.testing.assert_array_equal(floats(answer["outputs"][name]), values)


def test_output_filter_and_signatures(server):
    code, out, err = call(server, "tensorflow.serving.PredictionService/Predict", {
        "model_spec": {"name": "titanic", "signature_name": "serving_default"},
        "inputs": {"features": {"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": 1}, {"size": 12}]},
                                "float_val": FEATURES}},
        "output_filter": ["probability"]})
    assert code == 0, err
    assert list(json.loads(out)["outputs"]) == ["probability"]
    code, out, err = call(server, "tensorflow.serving.PredictionService/Predict", {
        "model_spec": {"name": "titanic", "signature_name": "classify_x"},
        "inputs": {"features": {"dtype": "DT_FLOAT", "float_val": FEATURES}}})
    assert code != 0 and "InvalidArgument" in err and "signature 'classify_x' not found" in err, err


def test_metadata_and_status_describe_the_model(server):
    code, out, err = call(server, "tensorflow.serving.PredictionService/GetModelMetadata",
                          {"model_spec": {"name": "titanic"}, "metadata_field": ["signature_def"]})
    assert code == 0, err
    signature = json.loads(out)["metadata"]["signature_def"]["signatureDef"]["serving_default"]
    assert signature["methodName"] == "tensorflow/serving/predict"
    features = signature["inputs"]["features"]
    assert features["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in features["tensorShape"]["dim"]] == ["-1", "12"]
    code, out, err = call(server, "tensorflow.serving.ModelService/GetModelStatus", {"model_spec": {"name": "titanic"}})
    assert code == 0, err
    assert json.loads(out)["model_version_status"][0]["state"] == "AVAILABLE"


@pytest.mark.parametrize("tensor, message", [
    ({"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": 1}, {"size": 12}]},
      "tensor_content": base64.b64encode(b"\0" * 40).decode()},
     "input 'features' has shape [1, 12] of FP32, which takes 48 bytes, but tensor_content holds 40"),
    ({"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": 1000000}, {"size": 1000000}]}, "float_val": [1]},
     "over the limits"),
    ({"dtype": "DT_INT64", "tensor_shape": {"dim": [{"size": 1}, {"size": 12}]}, "int64_val": [1]},
     "inference input 'features' data-type is 'INT64', but model 'titanic' expects 'FP32'"),
    ({"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": 1}, {"size": 12}]}, "int64_val": [1]},
     "input 'features' is DT_FLOAT, whose values go in float_val, but int64_val holds values"),
])
def test_hostile_tensors_are_invalid_arguments(server, tensor, message):
    code, out, err = call(server, "tensorflow.serving.PredictionService/Predict",
                          {"model_spec": {"name": "titanic"}, "inputs": {"features": tensor}})
    assert code != 0
    assert "InvalidArgument" in err and message in err, err
    # The server is unharmed.
    assert requests.get(f"http://{server.address}/v2/health/ready").status_code == 200


# -- A grpcio client on TF Serving's published messages (tfserving_protos.py)


@pytest.fixture(scope="module")
def tf():
    import grpc

    from tfserving_protos import load

    _, message = load()
    return grpc, message


def stub(grpc, server, message, service, method, request_type, response_type):
    channel = grpc.insecure_channel(server.grpc_address)
    return channel.unary_unary(
        f"/tensorflow.serving.{service}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=message(f"tensorflow.serving.{response_type}").FromString,
    )


def titanic_request(message):
    """A PredictRequest of the first passenger's features, in float_val."""
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = "titanic"
    tensor = request.inputs["features"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=1)
    tensor.tensor_shape.dim.add(size=12)
    tensor.float_val.extend(FEATURES)
    return request


def predict_call(tf, server):
    grpc, message = tf
    return stub(grpc, server, message, "PredictionService", "Predict", "PredictRequest", "PredictResponse")


@pytest.mark.parametrize("dtype, datatype, values", [
    ("DT_FLOAT", np.float32, [[1.5, -2.0, 0.1], [3.0, 1e30, -0.0]]),
    ("DT_INT64", np.int64, [[-(2**63), 0, 2**63 - 1], [1, 2, 3]]),
    ("DT_BOOL", np.bool_, [[True, False, True], [False, False, True]]),
])
@pytest.mark.parametrize("encoding", ["tensor_content", "typed"])
def test_grpcio_predict_with_published_messages(server, tf, dtype, datatype, values, encoding):
    grpc, message = tf
    model = {"DT_FLOAT": "identity_fp32", "DT_INT64": "identity_int64", "DT_BOOL": "identity_bool"}[dtype]
    input_name = requests.get(f"http://{server.address}/v2/models/{model}").json()["inputs"][0]["name"]
    array = np.array(values, dtype=datatype)
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = model
    request.model_spec.version.value = 1
    tensor = request.inputs[input_name]
    tensor.dtype = message("tensorflow.TensorProto").DESCRIPTOR.fields_by_name["dtype"].enum_type.values_by_name[dtype].number
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=size)
    if encoding == "tensor_content":
        tensor.tensor_content = array.astype(array.dtype.newbyteorder("<")).tobytes()
    else:
        field = {"DT_FLOAT": "float_val", "DT_INT64": "int64_val", "DT_BOOL": "bool_val"}[dtype]
        getattr(tensor, field).extend(array.reshape(-1).tolist())
    response = predict_call(tf, server)(request, timeout=30)
    assert response.model_spec.name == model and response.model_spec.version.value == 1
    (name, out), = response.outputs.items()
    assert [d.size for d in out.tensor_shape.dim] == list(array.shape)
    # TF Serving's answer: the typed field (TensorFlow's AsProtoField).
    assert out.tensor_content == b""
    field = {"DT_FLOAT": "float_val", "DT_INT64": "int64_val", "DT_BOOL": "bool_val"}[dtype]
    got = np.array(getattr(out, field), dtype=datatype).reshape(array.shape)
    np.testing.assert_array_equal(got, array)


def test_grpcio_predict_bytes_in_string_val(server, tf):
    grpc, message = tf
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = "identity_bytes"
    tensor = request.inputs["INPUT0"]
    tensor.dtype = 7  # DT_STRING
    tensor.tensor_shape.dim.add(size=1)
    tensor.tensor_shape.dim.add(size=3)
    tensor.string_val.extend([b"wire", b"", "\u00e9t\u00e9".encode()])
    response = predict_call(tf, server)(request, timeout=30)
    out = response.outputs["OUTPUT0"]
    assert out.dtype == 7
    assert list(out.string_val) == [b"wire", b"", "\u00e9t\u00e9".encode()]


def test_grpcio_predict_titanic_equals_rest_and_xgboost(server, tf):
    grpc, message = tf
    request = titanic_request(message)
    response = predict_call(tf, server)(request, timeout=30)
    expected = rest_outputs(server, [FEATURES])
    for name, values in expected.items():
        np.testing.assert_array_equal(np.array(response.outputs[name].float_val, dtype=np.float32), values)
    # And xgboost's own answer, on the same float32 row.
    import xgboost as xgb

    booster = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    x = xgb.DMatrix(np.array([FEATURES], dtype=np.float32))
    np.testing.assert_array_equal(np.array(response.outputs["probability"].float_val, dtype=np.float32),
                                  booster.predict(x))
    np.testing.assert_array_equal(np.array(response.outputs["margin"].float_val, dtype=np.float32),
                                  booster.predict(x, output_margin=True))


NARROW_AND_WIDE = [
    # dtype, TF's dtype number, V2 datatype, values, the field TF writes
    (np.int8, 6, "INT8", [[-128, 0, 127]], "int_val"),
    (np.uint16, 17, "UINT16", [[0, 65535, 7]], "int_val"),
    (np.float16, 19, "FP16", [[1.5, -0.25, 65504]], "half_val"),
    (np.float64, 2, "FP64", [[1e300, -0.0, 0.1]], "double_val"),
]


@pytest.fixture(scope="module")
def identities(tmp_path_factory):
    """Identity models of the types the bundled ones do not cover."""
    root = tmp_path_factory.mktemp("identities")
    for _, _, datatype, _, _ in NARROW_AND_WIDE:
        folder = root / f"identity_{datatype.lower()}"
        folder.mkdir()
        (folder / "config.toml").write_text(
            'backend = "identity"\n'
            f'[[inputs]]\nname = "INPUT0"\ndatatype = "{datatype}"\nshape = [-1, -1]\n'
            f'[[outputs]]\nname = "OUTPUT0"\ndatatype = "{datatype}"\nshape = [-1, -1]\n')
    running = RunningServer(root)
    yield running
    running.stop()


@pytest.mark.parametrize("dtype, tf_dtype, datatype, values, field", NARROW_AND_WIDE)
def test_grpcio_predict_narrow_and_wide_types_answer_as_tensorflow_writes_them(
        identities, tf, dtype, tf_dtype, datatype, values, field):
    """TensorFlow's AsProtoField: 8- and 16-bit integers widen into int_val,
    halves go in half_val as their bit patterns."""
    grpc, message = tf
    array = np.array(values, dtype=dtype)
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = f"identity_{datatype.lower()}"
    tensor = request.inputs["INPUT0"]
    tensor.dtype = tf_dtype
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = array.astype(array.dtype.newbyteorder("<")).tobytes()
    out = predict_call(tf, identities)(request, timeout=30).outputs["OUTPUT0"]
    assert out.dtype == tf_dtype and out.tensor_content == b""
    got = np.array(getattr(out, field))
    if dtype is np.float16:
        got = got.astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(got.astype(dtype).reshape(array.shape), array)


def test_tensor_content_answers_when_asked(tf):
    """`--tf-tensor-content`: numbers in tensor_content, as raw little-endian
    bytes; strings stay in string_val."""
    grpc, message = tf
    running = RunningServer(MODELS, extra_args=["--tf-tensor-content"])
    try:
        request = titanic_request(message)
        response = predict_call(tf, running)(request, timeout=30)
        expected = rest_outputs(running, [FEATURES])
        for name, values in expected.items():
            out = response.outputs[name]
            assert len(out.float_val) == 0
            np.testing.assert_array_equal(np.frombuffer(out.tensor_content, dtype="<f4"), values)
    finally:
        running.stop()


def test_grpcio_metadata_and_status(server, tf):
    grpc, message = tf
    metadata = stub(grpc, server, message, "PredictionService", "GetModelMetadata",
                    "GetModelMetadataRequest", "GetModelMetadataResponse")
    request = message("tensorflow.serving.GetModelMetadataRequest")()
    request.model_spec.name = "titanic"
    request.metadata_field.append("signature_def")
    response = metadata(request, timeout=30)
    signatures = message("tensorflow.serving.SignatureDefMap")()
    assert response.metadata["signature_def"].Unpack(signatures)
    signature = signatures.signature_def["serving_default"]
    assert signature.method_name == "tensorflow/serving/predict"
    assert [d.size for d in signature.inputs["features"].tensor_shape.dim] == [-1, 12]
    assert set(signature.outputs) == {"probability", "margin"}
    status = stub(grpc, server, message, "ModelService", "GetModelStatus",
                  "GetModelStatusRequest", "GetModelStatusResponse")
    request = message("tensorflow.serving.GetModelStatusRequest")()
    request.model_spec.name = "titanic"
    response = status(request, timeout=30)
    (version,) = response.model_version_status
    assert version.version == 1
    assert version.state == 30  # AVAILABLE
    assert version.status.error_code == 0


def test_grpcio_hostile_tensor_is_invalid_argument(server, tf):
    grpc, message = tf
    request = message("tensorflow.serving.PredictRequest")()
    request.model_spec.name = "titanic"
    tensor = request.inputs["features"]
    tensor.dtype = 1
    tensor.tensor_shape.dim.add(size=10**12)
    tensor.tensor_shape.dim.add(size=12)
    with pytest.raises(grpc.RpcError) as raised:
        predict_call(tf, server)(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "over the limits" in raised.value.details()


def test_tf_serving_ports_serve_the_same_apis():
    """`--tf-grpc` and `--tf-http` listen where TF Serving's clients are
    pointed (its 8500 and 8501), beside the V2 ports, serving the same
    services."""
    import re

    import grpc

    from tfserving_protos import load

    server = RunningServer(MODELS, extra_args=["--tf-grpc", "127.0.0.1:0", "--tf-http", "127.0.0.1:0"])
    try:
        server.wait_for_log("TF Serving's gRPC port")
        log = "".join(server.log)
        tf_grpc = re.search(r"TF Serving's gRPC port grpc://(127\.0\.0\.1:\d+)", log).group(1)
        tf_http = re.search(r"TF Serving's REST port http://(127\.0\.0\.1:\d+)", log).group(1)
        assert tf_grpc != server.grpc_address and tf_http != server.address
        _, message = load()
        channel = grpc.insecure_channel(tf_grpc)
        status = channel.unary_unary(
            "/tensorflow.serving.ModelService/GetModelStatus",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message("tensorflow.serving.GetModelStatusResponse").FromString)
        request = message("tensorflow.serving.GetModelStatusRequest")()
        request.model_spec.name = "titanic"
        assert status(request, timeout=30).model_version_status[0].state == 30  # AVAILABLE
        rest = requests.post(f"http://{tf_http}/v1/models/titanic:predict", json={"instances": [FEATURES]})
        assert rest.status_code == 200, rest.text
        v2 = rest_outputs(server, [FEATURES])
        assert np.float32(rest.json()["predictions"][0]["probability"]) == v2["probability"][0]
    finally:
        server.stop()


def test_grpcio_an_unconfigured_version_label_is_not_found(server, tf):
    """A `version_label` the model's `[version_labels]` lacks is NOT_FOUND,
    as TF Serving answers; the bundled models configure none."""
    grpc, message = tf
    request = titanic_request(message)
    request.model_spec.version_label = "stable"
    with pytest.raises(grpc.RpcError) as raised:
        predict_call(tf, server)(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no version labelled 'stable'" in raised.value.details()
