"""`backend = "onnx"`: models built here with onnx.helper, served by
wirespeed (tract), asked through tritonclient HTTP and gRPC, and checked
against onnxruntime's outputs for the same file and inputs."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from conftest import RunningServer, run_wirespeed

RNG = np.random.default_rng(7)
OPSET = [helper.make_opsetid("", 17)]


def initializer(name, shape, scale=0.5):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def mlp():
    """8 features -> 16 (Relu) -> 3 (Softmax), any batch size (`N`)."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3])],
        [initializer("w1", (16, 8)), initializer("b1", (16,)), initializer("w2", (3, 16)), initializer("b2", (3,))],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def cnn():
    """A 1x8x8 image: Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm."""
    nodes = [
        helper.make_node("Conv", ["image", "k", "kb"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w", "wb"], ["scores"], transB=1),
    ]
    variance = numpy_helper.from_array((RNG.random(4) + 0.5).astype(np.float32), "var")
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 5])],
        [initializer("k", (4, 1, 3, 3)), initializer("kb", (4,)), initializer("gamma", (4,)),
         initializer("beta", (4,)), initializer("mean", (4,)), variance,
         initializer("w", (5, 64), 0.2), initializer("wb", (5,))],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def transformer_block():
    """One self-attention head and a feed-forward layer over [batch, 6, 8]:
    MatMul, Transpose, Softmax, LayerNormalization and Gelu (opset 20)."""
    d = 8
    scale = numpy_helper.from_array(np.array(1 / np.sqrt(d), dtype=np.float32), "scale")
    nodes = [
        helper.make_node("MatMul", ["tokens", "wq"], ["q"]),
        helper.make_node("MatMul", ["tokens", "wk"], ["k"]),
        helper.make_node("MatMul", ["tokens", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["raw"]),
        helper.make_node("Mul", ["raw", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["attended"]),
        helper.make_node("Add", ["tokens", "attended"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "g1", "b1"], ["n1"], axis=-1),
        helper.make_node("MatMul", ["n1", "w1"], ["up"]),
        helper.make_node("Gelu", ["up"], ["act"]),
        helper.make_node("MatMul", ["act", "w2"], ["down"]),
        helper.make_node("Add", ["n1", "down"], ["res2"]),
        helper.make_node("LayerNormalization", ["res2", "g2", "b2"], ["encoded"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 6, d])],
        [helper.make_tensor_value_info("encoded", TensorProto.FLOAT, ["batch", 6, d])],
        [initializer("wq", (d, d)), initializer("wk", (d, d)), initializer("wv", (d, d)), scale,
         initializer("g1", (d,)), initializer("b1", (d,)), initializer("w1", (d, 32)), initializer("w2", (32, d)),
         initializer("g2", (d,)), initializer("b2", (d,))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


MODELS = {
    "mlp": (mlp, "x", (8,), "probabilities"),
    "cnn": (cnn, "image", (1, 8, 8), "scores"),
    "block": (transformer_block, "tokens", (6, 8), "encoded"),
}


def write_model(root, name, model, config='backend = "onnx"\n'):
    folder = root / name
    folder.mkdir(parents=True)
    onnx.checker.check_model(model)
    onnx.save(model, folder / "model.onnx")
    (folder / "config.toml").write_text(config)
    return folder


@pytest.fixture(scope="module")
def onnx_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    for name, (make, *_rest) in MODELS.items():
        # tract's: ONNX Runtime, found in the tests' venv, would serve the
        # convolution under engine "auto" (ort_server's tests cover it).
        write_model(root, name, make(), 'backend = "onnx"\nengine = "tract"\n')
    server = RunningServer(root)
    yield server, root
    server.stop()


def reference(root, name, inputs):
    session = onnxruntime.InferenceSession(str(root / name / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_outputs_match_onnxruntime(onnx_server, name, rows, module):
    server, root = onnx_server
    _, input_name, shape, output_name = MODELS[name]
    x = RNG.standard_normal((rows, *shape)).astype(np.float32)
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    inp = module.InferInput(input_name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = client.infer(name, [inp]).as_numpy(output_name)
    want = reference(root, name, {input_name: x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_inputs_and_outputs_come_from_the_graph(onnx_server):
    server, _ = onnx_server
    metadata = httpclient.InferenceServerClient(server.address).get_model_metadata("cnn")
    assert metadata["platform"] == "onnx_tract"
    assert metadata["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert metadata["outputs"] == [{"name": "scores", "datatype": "FP32", "shape": [-1, 5]}]


@pytest.mark.parametrize("tensor, says", [
    ({"name": "x", "datatype": "FP64", "shape": [1, 8], "data": [0.0] * 8}, "FP64"),
    ({"name": "x", "datatype": "FP32", "shape": [1, 5], "data": [0.0] * 5}, "got [1,5]"),
    ({"name": "y", "datatype": "FP32", "shape": [1, 8], "data": [0.0] * 8}, "'y'"),
])
def test_wrong_inputs_get_a_400_naming_them(onnx_server, tensor, says):
    server, _ = onnx_server
    answer = requests.post(f"http://{server.address}/v2/models/mlp/infer", json={"inputs": [tensor]})
    assert answer.status_code == 400 and says in answer.json()["error"], answer.text


def test_a_config_that_disagrees_with_the_graph_names_both(tmp_path):
    write_model(tmp_path, "mlp", mlp(), 'backend = "onnx"\n[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, 9]\n')
    out = run_wirespeed("serve", "--models", tmp_path, "--check")
    assert out.returncode != 0 and "config.toml says FP32 [-1, 9], the graph says FP32 [-1, 8]" in out.stderr, \
        out.stderr
    (tmp_path / "mlp" / "config.toml").write_text(
        'backend = "onnx"\n[[outputs]]\nname = "scores"\ndatatype = "FP32"\nshape = [-1, 3]\n')
    out = run_wirespeed("serve", "--models", tmp_path, "--check")
    assert out.returncode != 0 and "'scores', which the graph does not have" in out.stderr \
        and "'probabilities'" in out.stderr, out.stderr


def unsupported_operator():
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], "odd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    return helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("com.example", 1)])


def test_broken_files_are_load_errors_and_the_other_models_serve(tmp_path):
    write_model(tmp_path, "good", mlp())
    folder = write_model(tmp_path, "cut", mlp())
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])
    future = mlp()
    future.opset_import[0].version = 99
    folder = tmp_path / "future"
    folder.mkdir()
    onnx.save(future, folder / "model.onnx")  # onnx.checker refuses it too
    (folder / "config.toml").write_text('backend = "onnx"\n')
    odd = tmp_path / "odd"
    odd.mkdir()
    onnx.save(unsupported_operator(), odd / "model.onnx")
    (odd / "config.toml").write_text('backend = "onnx"\n')
    server = RunningServer(tmp_path, extra_args=["--model-control-mode", "explicit", "--load-model", "good"])
    try:
        client = httpclient.InferenceServerClient(server.address)
        for name, says in [("cut", "failed to decode"), ("odd", "operators tract does not run: Frobnicate (node 'y')"),
                           ("future", "opset 99 of the default domain, which does not exist")]:
            with pytest.raises(InferenceServerException) as e:
                client.load_model(name)
            assert says in str(e.value) and "model.onnx" in str(e.value), e.value
        x = RNG.standard_normal((2, 8)).astype(np.float32)
        inp = httpclient.InferInput("x", [2, 8], "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("good", [inp]).as_numpy("probabilities")
        np.testing.assert_allclose(got, reference(tmp_path, "good", {"x": x}), rtol=1e-5, atol=1e-6)
    finally:
        server.stop()


def test_kserves_layout_of_an_onnx_model_needs_no_config(tmp_path):
    """/mnt/models with model.onnx alone, served as the InferenceService's
    name (--model-name), as KServe's storage initializer lays it out."""
    mnt = tmp_path / "mnt" / "models"
    mnt.mkdir(parents=True)
    onnx.save(mlp(), mnt / "model.onnx")
    server = RunningServer(mnt, extra_args=["--model-name", "classifier"])
    try:
        x = RNG.standard_normal((3, 8)).astype(np.float32)
        client = grpcclient.InferenceServerClient(server.grpc_address)
        inp = grpcclient.InferInput("x", [3, 8], "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("classifier", [inp]).as_numpy("probabilities")
        session = onnxruntime.InferenceSession(str(mnt / "model.onnx"), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    finally:
        server.stop()


def onnxruntime_library():
    """The ONNX Runtime library the onnxruntime wheel ships."""
    from pathlib import Path
    return str(next((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so*")))


@pytest.fixture(scope="module")
def ort_server(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("onnx_ort")
    for name, (make, *_rest) in MODELS.items():
        write_model(root, name, make(), 'backend = "onnx"\nengine = "onnxruntime"\ninstances = 2\n')
    monkeypatch_module.setenv("ORT_DYLIB_PATH", onnxruntime_library())
    server = RunningServer(root)
    yield server, root
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_onnxruntime_engine_answers_as_onnxruntime(ort_server, name, module):
    """engine = "onnxruntime" runs the wheel's own library: the same floats."""
    server, root = ort_server
    _, input_name, shape, output_name = MODELS[name]
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    for rows in (1, 7, 64):
        x = RNG.standard_normal((rows, *shape)).astype(np.float32)
        inp = module.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer(name, [inp]).as_numpy(output_name)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(root / name / "model.onnx"), options,
                                               providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got, session.run(None, {input_name: x})[0])


def test_the_onnxruntime_engine_reports_its_platform_and_bad_inputs(ort_server):
    server, _ = ort_server
    metadata = httpclient.InferenceServerClient(server.address).get_model_metadata("mlp")
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]
    answer = requests.post(f"http://{server.address}/v2/models/mlp/infer", json={
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 5], "data": [0.0] * 5}]})
    assert answer.status_code == 400 and "Expected [-1,8], got [1,5]" in answer.json()["error"], answer.text


def test_the_onnxruntime_engine_without_its_library_is_a_load_error(tmp_path, monkeypatch):
    write_model(tmp_path, "mlp", mlp(), 'backend = "onnx"\nengine = "onnxruntime"\n')
    # No Python environment with the onnxruntime package at hand either.
    for name in ("ORT_DYLIB_PATH", "VIRTUAL_ENV", "WIRESPEED_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-python"))
    monkeypatch.setenv("HOME", str(tmp_path))
    out = run_wirespeed("serve", "--models", tmp_path, "--check")
    assert out.returncode != 0 and "set ORT_DYLIB_PATH" in out.stderr, out.stderr
    monkeypatch.setenv("ORT_DYLIB_PATH", str(tmp_path / "nowhere.so"))
    out = run_wirespeed("serve", "--models", tmp_path, "--check")
    assert out.returncode != 0 and "nowhere.so" in out.stderr, out.stderr


def test_onnx_runtime_is_found_in_the_python_environment_at_hand(tmp_path, monkeypatch):
    """No ORT_DYLIB_PATH: the onnxruntime package of the active venv (the
    tests' own, VIRTUAL_ENV) is found, the log says where, and it serves:
    the same floats as that package's own session."""
    write_model(tmp_path, "mlp", mlp(), 'backend = "onnx"\nengine = "onnxruntime"\n')
    monkeypatch.delenv("ORT_DYLIB_PATH", raising=False)
    monkeypatch.setenv("VIRTUAL_ENV", str(Path(sys.executable).parent.parent))
    checked = run_wirespeed("serve", "--models", tmp_path, "--check")
    assert checked.returncode == 0, checked.stderr
    assert "ONNX Runtime found" in checked.stderr and onnxruntime_library() in checked.stderr, checked.stderr
    server = RunningServer(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.address)
        assert client.get_model_metadata("mlp")["platform"] == "onnxruntime_onnx"
        x = RNG.standard_normal((5, 8)).astype(np.float32)
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("mlp", [inp]).as_numpy("probabilities")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(tmp_path / "mlp" / "model.onnx"), options,
                                               providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
    finally:
        server.stop()
