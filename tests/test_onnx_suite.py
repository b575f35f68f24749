"""A CI-sized sample of the ONNX project's backend test suite
(`onnx_suite.py`: every 12th of the node tests the pinned `onnx` package
generates), each model alone in a folder with only `model.onnx`, loaded
through the repository API and asked over HTTP, against the expected
outputs, and onnxruntime under the same rules. wirespeed's default engine
(`auto`: tract, else ONNX Runtime from the wheel's library) must give no
wrong answer, and serve at least 95% of what onnxruntime serves. The whole
suite is `benchmarks/scripts/onnx_suite.py`, its counts in docs/onnx.md."""

import pytest

import onnx_suite
from conftest import RunningServer


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    cases = onnx_suite.node_cases()[::12]
    root = tmp_path_factory.mktemp("onnx_suite")
    onnx_suite.write_repository(cases, root)
    return cases, root


def test_the_suite_sample_is_served_as_onnxruntime_serves_it(sample, monkeypatch):
    cases, root = sample
    monkeypatch.setenv("ORT_DYLIB_PATH", onnx_suite.onnxruntime_library())
    server = RunningServer(root, ["--model-control-mode", "explicit", "--metrics", "off"])
    try:
        ours = onnx_suite.run_wirespeed(cases, server.address)
    finally:
        server.stop()
    theirs = onnx_suite.run_onnxruntime(cases)
    wrong = [name for name, (outcome, _) in ours.outcomes.items() if outcome == "wrong"]
    assert not wrong, f"wrong answers: {wrong}"
    missed = {name: detail for name, (outcome, detail) in ours.outcomes.items()
              if outcome != "correct" and theirs.outcomes[name][0] == "correct"}
    assert ours.count("correct") >= 0.95 * theirs.count("correct"), (
        f"wirespeed {ours.line()}; onnxruntime {theirs.line()}; not served: {missed}")


# The wrong answers the suite found on tract, each a case of the suite:
# served rightly (on ONNX Runtime, by `auto`) or refused, never wrong; on
# tract alone, refused.
KNOWN_WRONG_ON_TRACT = [
    "test_rnn_seq_length", "test_simple_rnn_reverse", "test_gru_reverse", "test_lstm_reverse",
    "test_spacetodepth_crd_mode_example", "test_celu", "test_celu_float16", "test_swish",
    "test_bitshift_left_int8_negative_shift", "test_bitshift_right_int32_shift_ge_width",
    "test_reduce_max_empty_set", "test_reduce_min_empty_set",
    "test_dft", "test_stft", "test_resize_downsample_scales_linear_align_corners",
    "test_maxunpool_export_with_output_shape",
]


@pytest.mark.parametrize("engine", ["auto", "tract"])
def test_what_tract_answered_wrongly_is_served_rightly_or_refused(tmp_path, monkeypatch, engine):
    cases = [c for c in onnx_suite.node_cases() if c.name in KNOWN_WRONG_ON_TRACT]
    assert len(cases) >= 12, [c.name for c in cases]
    onnx_suite.write_repository(cases, tmp_path)
    if engine == "tract":
        for case in cases:
            (tmp_path / case.name / "config.toml").write_text('backend = "onnx"\nengine = "tract"\n')
    monkeypatch.setenv("ORT_DYLIB_PATH", onnx_suite.onnxruntime_library())
    server = RunningServer(tmp_path, ["--model-control-mode", "explicit", "--metrics", "off"])
    try:
        ours = onnx_suite.run_wirespeed(cases, server.address)
    finally:
        server.stop()
    assert ours.count("wrong") == 0, ours.outcomes
    if engine == "auto":
        # ONNX Runtime answers these rightly, but for the few no engine
        # here answers as ONNX defines them.
        assert ours.count("correct") >= len(cases) - 5, ours.outcomes


def test_outputs_keep_the_graphs_names_when_tract_merges_them(tmp_path):
    """A constant output and an Identity of it are one outlet in tract's
    plan: both are still listed and asked by the graph's own names, and
    answer as onnxruntime does."""
    import numpy as np
    import onnx
    import onnxruntime
    import requests
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])),
             helper.make_node("Identity", ["c"], ["d"]),
             helper.make_node("Add", ["x", "x"], ["y"])]
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2])  # noqa: E731
    model = helper.make_model(helper.make_graph(nodes, "g", [io("x")], [io("c"), io("d"), io("y")]),
                              opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "model.onnx")
    server = RunningServer(tmp_path, ["--metrics", "off"])
    try:
        url = f"http://{server.address}/v2/models/m"
        assert [o["name"] for o in requests.get(url, timeout=10).json()["outputs"]] == ["c", "d", "y"]
        answer = requests.post(f"{url}/infer", timeout=10, json={
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}).json()
        got = {o["name"]: o["data"] for o in answer["outputs"]}
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": np.array([1, 2], np.float32)})
        assert got == {name: w.tolist() for name, w in zip(["c", "d", "y"], want)}
    finally:
        server.stop()


def test_two_int64_outputs_of_one_shape_load_on_tract(tmp_path):
    """A Shape given as two outputs (itself and an Identity of it): tract
    computes dimensions, which wirespeed casts to INT64 per output."""
    import onnx
    import requests
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Identity", ["s"], ["t"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.INT64, [2]) for n in ("s", "t")])
    (tmp_path / "m").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m" / "model.onnx")
    (tmp_path / "m" / "config.toml").write_text('backend = "onnx"\nengine = "tract"\n')
    server = RunningServer(tmp_path, ["--metrics", "off"])
    try:
        answer = requests.post(f"http://{server.address}/v2/models/m/infer", timeout=10, json={
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [0] * 6}]}).json()
        assert {o["name"]: (o["datatype"], o["data"]) for o in answer["outputs"]} == {
            "s": ("INT64", [2, 3]), "t": ("INT64", [2, 3])}
    finally:
        server.stop()
