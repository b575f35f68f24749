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
