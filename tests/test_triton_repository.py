"""A Triton model repository, laid out as Triton's docs lay it out, served
unchanged: `config.pbtxt` for ONNX Runtime models (`platform:
"onnxruntime_onnx"`, run by the onnx backend) and Triton's identity
backend, beside the Python backend's; a platform wirespeed does not run is
refused by name with the way to serve it. The models are asked with
tritonclient, unmodified, as NVIDIA's client examples ask them
(`simple_http_infer_client.py`, `simple_grpc_health_metadata.py`,
`grpc_explicit_int_content_client.py`): the same calls, the same data,
the same checks, error texts included; ONNX answers against
onnxruntime's."""

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import RunningServer, run_wirespeed
from triton_folders import SIMPLE_CONFIG, inputs_of, simple_onnx

IDENTITY_CONFIG = """
name: "identity_int32"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    (root / "simple" / "1").mkdir(parents=True)
    (root / "simple" / "config.pbtxt").write_text(SIMPLE_CONFIG)
    onnx.save(simple_onnx(), root / "simple" / "1" / "model.onnx")
    (root / "identity_int32" / "1").mkdir(parents=True)
    (root / "identity_int32" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    return root


@pytest.fixture(scope="module")
def server(repository):
    running = RunningServer(repository)
    yield running
    running.stop()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_simple_example_answers_as_onnxruntime_does(server, repository, module):
    """simple_{http,grpc}_infer_client.py: sums and differences, checked
    element by element, and against onnxruntime on the same file."""
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    input0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    input1 = np.ones((1, 16), dtype=np.int32)
    result = client.infer("simple", inputs_of(module, input0, input1))
    output0, output1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    for i in range(16):
        assert input0[0][i] + input1[0][i] == output0[0][i]
        assert input0[0][i] - input1[0][i] == output1[0][i]
    session = onnxruntime.InferenceSession(str(repository / "simple" / "1" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    want0, want1 = session.run(None, {"INPUT0": input0, "INPUT1": input1})
    np.testing.assert_array_equal(output0, want0)
    np.testing.assert_array_equal(output1, want1)
    # The model's metadata, as Triton reports an ONNX model's.
    metadata = client.get_model_metadata("simple", **({} if module is httpclient else {"as_json": True}))
    assert metadata["platform"] == "onnxruntime_onnx" or metadata["platform"].startswith("onnx"), metadata


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_wrong_model_name_gets_tritons_words(server, module):
    """simple_http_infer_client.py: the message starts with "Request for
    unknown model"; simple_{http,grpc}_health_metadata.py: metadata of a
    wrong name says it too."""
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    data = np.zeros((1, 16), dtype=np.int32)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("wrong_model_name", inputs_of(module, data, data)).get_response()
    assert raised.value.message().startswith("Request for unknown model"), raised.value.message()
    with pytest.raises(InferenceServerException) as raised:
        client.get_model_metadata("wrong_model_name")
    assert "Request for unknown model" in raised.value.message()


def test_explicit_int_contents_and_the_mixed_case_as_the_example_checks(server):
    """grpc_explicit_int_content_client.py: inputs in `contents.int_contents`
    answer; contents for one input mixed with raw_input_contents get
    Triton's message, word for word."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_address))
    input0_data = list(range(16))
    input1_data = [1] * 16
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", input0_data), ("INPUT1", input1_data)):
        tensor = service_pb2.ModelInferRequest().InferInputTensor(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents[:] = data
        request.inputs.extend([tensor])
    request.outputs.extend([service_pb2.ModelInferRequest().InferRequestedOutputTensor(name="OUTPUT0"),
                            service_pb2.ModelInferRequest().InferRequestedOutputTensor(name="OUTPUT1")])
    response = stub.ModelInfer(request)
    output0 = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    output1 = np.frombuffer(response.raw_output_contents[1], dtype=np.int32)
    assert list(output0) == [a + b for a, b in zip(input0_data, input1_data)]
    assert list(output1) == [a - b for a, b in zip(input0_data, input1_data)]
    request.raw_input_contents.extend([np.array(input0_data[0:8], dtype=np.int32).tobytes()])
    request.inputs[0].contents.int_contents[:] = input0_data[8:]
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request)
    assert ("contents field must not be specified when using "
            "raw_input_contents for 'INPUT0' for model 'simple'" in raised.value.__str__()), raised.value


def test_tritons_identity_backend_config_serves(server):
    client = httpclient.InferenceServerClient(server.address)
    data = np.array([3, -1, 7], dtype=np.int32)
    inp = httpclient.InferInput("INPUT0", [3], "INT32")
    inp.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("identity_int32", [inp]).as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("platform, what", [
    ("tensorflow_graphdef", "TensorFlow"), ("tensorflow_savedmodel", "TensorFlow"),
    ("pytorch_libtorch", "PyTorch"), ("tensorrt_plan", "TensorRT")])
def test_a_platform_wirespeed_does_not_run_is_refused_by_name_with_the_way_to_serve_it(tmp_path, platform, what):
    folder = tmp_path / "repo" / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(SIMPLE_CONFIG.replace('platform: "onnxruntime_onnx"', f'platform: "{platform}"'))
    result = run_wirespeed("serve", "--check", "--models", tmp_path / "repo")
    assert result.returncode != 0
    for needle in (platform, what, "upstream", "config.pbtxt"):
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_tritons_batch_dimension_reads_back_and_is_held_to(server, module):
    """`max_batch_size: 8`: the configuration reads back as Triton's (8,
    dims without the batch dimension), and 9 rows get Triton's error."""
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    config = client.get_model_config("simple", **({} if module is httpclient else {"as_json": True}))
    config = config.get("config", config)
    assert int(config["max_batch_size"]) == 8
    assert [[int(d) for d in t["dims"]] for t in config["input"]] == [[16], [16]]
    assert [[int(d) for d in t["dims"]] for t in config["output"]] == [[16], [16]]
    rows = np.zeros((9, 16), dtype=np.int32)
    inputs = [module.InferInput(n, [9, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for inp in inputs:
        inp.set_data_from_numpy(rows)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("simple", inputs)
    assert "inference request batch-size must be <= 8 for 'simple'" in raised.value.message()
    eight = [module.InferInput(n, [8, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for inp in eight:
        inp.set_data_from_numpy(np.ones((8, 16), dtype=np.int32))
    assert client.infer("simple", eight).as_numpy("OUTPUT0").shape == (8, 16)


def test_a_version_folder_with_only_model_onnx_is_completed_from_the_graph(tmp_path):
    """Triton's auto-complete: `m/1/model.onnx` and no config; the inputs
    and outputs come from the graph, and a variable first dimension on
    every tensor gives Triton's default max_batch_size of 4."""
    (tmp_path / "repo" / "simple" / "1").mkdir(parents=True)
    onnx.save(simple_onnx(), tmp_path / "repo" / "simple" / "1" / "model.onnx")
    server = RunningServer(tmp_path / "repo")
    try:
        client = httpclient.InferenceServerClient(server.address)
        config = client.get_model_config("simple")
        assert config["max_batch_size"] == 4
        assert [(t["name"], [int(d) for d in t["dims"]]) for t in config["input"]] == [("INPUT0", [16]), ("INPUT1", [16])]
        data = np.arange(32, dtype=np.int32).reshape(2, 16)
        inputs = inputs_of(httpclient, data[:1], data[1:])
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), data[:1] + data[1:])
    finally:
        server.stop()


IMAGE_CONFIG = """
name: "image"
platform: "onnxruntime_onnx"
max_batch_size: 2
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 4, 4 ]
  }
]
output [
  {
    name: "scores"
    data_type: TYPE_FP32
    dims: [ 3 ]
    label_filename: "labels.txt"
  }
]
"""


def image_onnx():
    """A mean over each channel of an NCHW image: [N, 3, 4, 4] -> [N, 3]."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["data_0"], ["scores"], axes=[2, 3], keepdims=0)],
        "image",
        [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_image_models_format_and_labels_read_back_as_image_client_reads_them(tmp_path):
    """image_client.py's parse_model: one input with FORMAT_NCHW (or NHWC)
    and dims of 3, a max_batch_size, one output; its classification then
    asks `class_count` and reads the labels."""
    folder = tmp_path / "repo" / "image"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(IMAGE_CONFIG)
    (folder / "labels.txt").write_text("red\ngreen\nblue\n")
    onnx.save(image_onnx(), folder / "1" / "model.onnx")
    server = RunningServer(tmp_path / "repo")
    try:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        config = client.get_model_config("image").config
        (input_config,) = config.input
        assert input_config.format == grpcclient.model_config_pb2.ModelInput.FORMAT_NCHW
        assert config.max_batch_size == 2 and list(input_config.dims) == [3, 4, 4]
        assert config.output[0].label_filename == "labels.txt"
        image = np.zeros((1, 3, 4, 4), dtype=np.float32)
        image[0, 2] = 1.0
        inp = grpcclient.InferInput("data_0", [1, 3, 4, 4], "FP32")
        inp.set_data_from_numpy(image)
        top = client.infer("image", [inp], outputs=[grpcclient.InferRequestedOutput("scores", class_count=1)])
        assert top.as_numpy("scores").reshape(-1)[0].decode() == "1.000000:2:blue"
        # A batch of two: each row classified, as image_client.py reads them.
        two = np.concatenate([image, np.flip(image, axis=1).copy()])
        inp = grpcclient.InferInput("data_0", [2, 3, 4, 4], "FP32")
        inp.set_data_from_numpy(two)
        top = client.infer("image", [inp], outputs=[grpcclient.InferRequestedOutput("scores", class_count=1)])
        assert top.as_numpy("scores").shape == (2, 1)
        assert [r[0].decode() for r in top.as_numpy("scores")] == ["1.000000:2:blue", "1.000000:0:red"]
        # image_client.py over HTTP reads the format from the JSON.
        http = httpclient.InferenceServerClient(server.address).get_model_config("image")
        assert http["input"][0]["format"] == "FORMAT_NCHW", http["input"]
    finally:
        server.stop()


# As Triton's densenet_onnx example configures its model: the wire's dims,
# and the graph's own shape in `reshape`.
RESHAPED_CONFIG = """
name: "reshaped"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 4, 4 ]
    reshape { shape: [ 1, 3, 4, 4 ] }
  }
]
output [
  {
    name: "scores"
    data_type: TYPE_FP32
    dims: [ 3 ]
    reshape { shape: [ 1, 3 ] }
  }
]
"""


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_reshape_gives_the_model_its_shape_and_the_client_the_wires(tmp_path, module):
    """`reshape`: the client sends [3, 4, 4] and gets [3]; the graph takes
    [1, 3, 4, 4] and gives [1, 3]; the values are onnxruntime's."""
    folder = tmp_path / "repo" / "reshaped"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(RESHAPED_CONFIG)
    onnx.save(image_onnx(), folder / "1" / "model.onnx")
    server = RunningServer(tmp_path / "repo")
    try:
        address = server.address if module is httpclient else server.grpc_address
        client = module.InferenceServerClient(address)
        metadata = client.get_model_metadata("reshaped", **({} if module is httpclient else {"as_json": True}))
        assert [int(d) for d in metadata["inputs"][0]["shape"]] == [3, 4, 4]
        assert [int(d) for d in metadata["outputs"][0]["shape"]] == [3]
        image = np.random.default_rng(5).random((3, 4, 4), dtype=np.float32)
        inp = module.InferInput("data_0", [3, 4, 4], "FP32")
        inp.set_data_from_numpy(image)
        got = client.infer("reshaped", [inp]).as_numpy("scores")
        session = onnxruntime.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        want = session.run(None, {"data_0": image.reshape(1, 3, 4, 4)})[0].reshape(3)
        assert got.shape == (3,)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    finally:
        server.stop()


def test_reshape_follows_tritons_batch_dimension(tmp_path):
    """With max_batch_size, both shapes follow the batch: [2, 48] on the
    wire is [2, 3, 4, 4] for the graph."""
    config = IMAGE_CONFIG.replace("dims: [ 3, 4, 4 ]", "dims: [ 48 ]\n    reshape { shape: [ 3, 4, 4 ] }")
    folder = tmp_path / "repo" / "image"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "labels.txt").write_text("red\ngreen\nblue\n")
    onnx.save(image_onnx(), folder / "1" / "model.onnx")
    server = RunningServer(tmp_path / "repo")
    try:
        client = httpclient.InferenceServerClient(server.address)
        flat = np.random.default_rng(6).random((2, 48), dtype=np.float32)
        inp = httpclient.InferInput("data_0", [2, 48], "FP32")
        inp.set_data_from_numpy(flat)
        got = client.infer("image", [inp]).as_numpy("scores")
        np.testing.assert_allclose(got, flat.reshape(2, 3, 16).mean(axis=2), rtol=1e-5)
    finally:
        server.stop()


def test_model_control_as_simple_http_model_control_does_it(repository):
    """simple_{http,grpc}_model_control.py: load, a config override in the
    wrong format fails to load, Triton's JSON override `{"max_batch_size":
    "16"}` reads back, unload, and a wrong model name fails to load."""
    server = RunningServer(repository, extra_args=["--model-control-mode", "explicit"])
    try:
        for module, address in ((httpclient, server.address), (grpcclient, server.grpc_address)):
            client = module.InferenceServerClient(address)
            model_name = "simple"
            client.load_model(model_name)
            assert client.is_model_ready(model_name)
            with pytest.raises(InferenceServerException) as raised:
                client.load_model(model_name, config='"parameters": {"config": {{"max_batch_size": "16"}}}')
            assert "failed to load" in raised.value.message(), raised.value.message()
            client.load_model(model_name, config='{"max_batch_size":"16"}')
            config = client.get_model_config(model_name, **({} if module is httpclient else {"as_json": True}))
            config = config.get("config", config)
            assert int(config["max_batch_size"]) == 16
            client.unload_model(model_name)
            assert not client.is_model_ready(model_name)
            with pytest.raises(InferenceServerException) as raised:
                client.load_model("wrong_model_name")
            assert "failed to load" in raised.value.message()
    finally:
        server.stop()


# A Python model that notes each request's inputs, to see its warmup.
