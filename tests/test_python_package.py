"""The `wirespeed` Python package (python/), built into a wheel by
scripts/build-wheel and installed into .venv: `decode_request` against
`json.loads` + numpy and tritonclient's own binary bodies, `encode_response`
read back by `json.loads` and tritonclient's `InferResult`, `trees` against
the xgboost and lightgbm packages, and the `wirespeed` command the wheel
installs."""

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import lightgbm as lgb
import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import xgboost

from conftest import MODELS, ROOT
from titanic import features, load_params, passenger_rows

try:
    import wirespeed
except ImportError:  # pragma: no cover
    pytest.fail("the wirespeed package is not installed: run scripts/build-wheel", pytrace=False)

# Every datatype the protocol has (BF16 as ml_dtypes' bfloat16), with
# values that stress it: extremes, subnormals, halfway cases, non-ASCII text.
VALUES = {
    "BOOL": (np.bool_, [True, False, True, True]),
    "UINT8": (np.uint8, [0, 1, 254, 255]),
    "UINT16": (np.uint16, [0, 1, 65534, 65535]),
    "UINT32": (np.uint32, [0, 1, 2**32 - 2, 2**32 - 1]),
    "UINT64": (np.uint64, [0, 1, 2**64 - 2, 2**64 - 1]),
    "INT8": (np.int8, [-128, -1, 0, 127]),
    "INT16": (np.int16, [-32768, -1, 0, 32767]),
    "INT32": (np.int32, [-(2**31), -1, 0, 2**31 - 1]),
    "INT64": (np.int64, [-(2**63), -1, 0, 2**63 - 1]),
    "FP16": (np.float16, [0.1, -65504.0, 6e-8, 1.0009765625]),
    "FP32": (np.float32, [0.1, 3.4028234663852886e38, 1.401298464324817e-45, 1.0000001]),
    "FP64": (np.float64, [0.1, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308]),
    "BF16": (ml_dtypes.bfloat16, [0.1, -3.3895313892515355e38, 1.00390625, 1e-40]),
    "BYTES": (np.object_, ["plain", "naïve", "", "汉字 ☃"]),
}


def reference(datatype, values):
    """What json.loads + numpy make of the values (BYTES as UTF-8 bytes)."""
    dtype, _ = VALUES[datatype]
    if datatype == "BYTES":
        return np.array([v.encode() for v in values], dtype=np.object_).reshape(2, 2)
    return np.array(values, dtype=dtype).reshape(2, 2)


def assert_same(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        assert got.tobytes() == want.tobytes(), (got, want)
    else:
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("datatype", VALUES)
def test_decode_request_equals_json_loads_and_numpy(datatype):
    _, values = VALUES[datatype]
    body = json.dumps(
        {"id": "r1", "parameters": {"priority": 2, "flag": True, "note": "x", "ratio": 0.5},
         "inputs": [{"name": "x", "shape": [2, 2], "datatype": datatype, "data": values}],
         "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}
    ).encode()
    request = wirespeed.decode_request(body)
    parsed = json.loads(body)
    assert request.id == parsed["id"]
    assert request.parameters == parsed["parameters"]
    assert request.outputs == parsed["outputs"]
    assert list(request.inputs) == ["x"]
    # json.loads gives floats as doubles; numpy rounds them once to the dtype.
    assert_same(request.inputs["x"], reference(datatype, parsed["inputs"][0]["data"]))


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64", "BF16"])
def test_non_finite_floats_as_python_writes_them(datatype):
    dtype, _ = VALUES[datatype]
    values = [float("nan"), float("inf"), float("-inf"), -0.0]
    body = json.dumps({"inputs": [{"name": "x", "shape": [4], "datatype": datatype, "data": values}]}).encode()
    assert b"NaN" in body and b"-Infinity" in body
    got = wirespeed.decode_request(body).inputs["x"]
    want = np.array(json.loads(body)["inputs"][0]["data"], dtype=dtype)
    assert got.tobytes() == want.tobytes()
    with pytest.raises(wirespeed.DecodeError) as refused:
        wirespeed.decode_request(body, strict=True)
    assert refused.value.input == "x"


def test_bytes_bytearray_and_memoryview_decode_alike():
    body = json.dumps({"inputs": [{"name": "x", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}]}).encode()
    for given in (body, bytearray(body), memoryview(body), memoryview(b"  " + body)[2:]):
        assert wirespeed.decode_request(given).inputs["x"].tolist() == [1, 2, 3]
    with pytest.raises(TypeError):
        wirespeed.decode_request(body.decode())


def test_arrays_own_the_decoders_buffers():
    body = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}]})
    x = wirespeed.decode_request(body.encode()).inputs["x"]
    # No copy: the array is a view of the Rust buffer the decoder filled.
    assert not x.flags.owndata
    assert type(x.base).__name__ == "PySliceContainer"
    assert x.flags.c_contiguous and x.flags.writeable
    x += 1  # the memory is the array's to use
    assert x.tolist() == [[2, 3, 4], [5, 6, 7]]


@pytest.mark.parametrize("datatype", VALUES)
def test_binary_bodies_written_by_tritonclient(datatype):
    dtype, values = VALUES[datatype]
    if datatype == "BYTES":
        array = np.array([v.encode() for v in values], dtype=np.object_).reshape(2, 2)
    else:
        array = np.array(values, dtype=dtype).reshape(2, 2)
    binary = httpclient.InferInput("b", [2, 2], datatype).set_data_from_numpy(array, binary_data=True)
    inline = httpclient.InferInput("j", [1], "INT64").set_data_from_numpy(np.array([7], dtype=np.int64), binary_data=False)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [binary, inline], outputs=[httpclient.InferRequestedOutput("y")], request_id="q"
    )
    request = wirespeed.decode_request(body, header_length)
    assert request.id == "q"
    assert_same(request.inputs["b"], array)
    assert request.inputs["j"].tolist() == [7]


HOSTILE = [
    (b"", "syntax"),
    (b"[]", "schema"),
    (b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1]}]}', "shape"),
    (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [300]}]}', "range"),
    (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP99", "data": [1]}]}', "type"),
    (b'{"inputs": [{"name": "x", "shape": [1000000000000], "datatype": "FP32", "data": []}]}', "limit"),
    (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]', "syntax"),
    (b'{"unknown": ' + b"[" * 100000, "limit"),
    (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["\\ud800"]}]}', None),
]


@pytest.mark.parametrize("body,category", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_bodies_raise_decode_error(body, category):
    with pytest.raises(wirespeed.DecodeError) as error:
        wirespeed.decode_request(body)
    assert isinstance(error.value, ValueError)
    if category:
        assert error.value.category == category, str(error.value)
    assert 0 <= error.value.offset <= len(body)


def test_every_truncation_and_every_flipped_byte_is_an_error_or_a_request():
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [httpclient.InferInput("a", [2, 3], "FP32").set_data_from_numpy(np.ones((2, 3), np.float32)),
         httpclient.InferInput("s", [2], "BYTES").set_data_from_numpy(np.array([b"x", b"yz"], dtype=np.object_))]
    )
    for cut in range(len(body)):
        with pytest.raises(wirespeed.DecodeError):
            wirespeed.decode_request(body[:cut], header_length if cut >= header_length else None)
    rng = np.random.default_rng(3)
    for _ in range(2000):
        mutated = bytearray(body)
        mutated[rng.integers(len(body))] = rng.integers(256)
        try:
            wirespeed.decode_request(bytes(mutated), header_length)
        except wirespeed.DecodeError:
            pass
    # Binary sizes that disagree with the body.
    with pytest.raises(wirespeed.DecodeError) as error:
        wirespeed.decode_request(body + b"\0", header_length)
    assert error.value.category == "binary"
    with pytest.raises(wirespeed.DecodeError):
        wirespeed.decode_request(body, len(body) + 1)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_encode_response_reads_back_with_json_and_tritonclient(binary):
    outputs = {}
    for datatype, (dtype, values) in VALUES.items():
        if datatype == "BYTES":
            outputs[datatype] = np.array([v.encode() for v in values], dtype=np.object_).reshape(2, 2)
        else:
            outputs[datatype] = np.array(values, dtype=dtype).reshape(2, 2)
    body, header_length = wirespeed.encode_response(
        outputs, model_name="m", model_version="3", id="r", parameters={"sequence_end": True}, binary=binary
    )
    assert (header_length is not None) == binary
    head = json.loads(body[:header_length] if binary else body)
    assert (head["model_name"], head["model_version"], head["id"]) == ("m", "3", "r")
    assert head["parameters"] == {"sequence_end": True}
    result = httpclient.InferResult.from_response_body(body, header_length=header_length)
    for name, array in outputs.items():
        got = result.as_numpy(name)
        if name == "BYTES" and not binary:
            assert got.tolist() == [[v.decode() for v in row] for row in array.tolist()]
        elif name == "FP16" and not binary:
            assert got.tolist() == array.tolist()
        else:
            assert_same(got, array)


def titanic_rows():
    params = load_params()
    return np.array([features(r, params) for r in passenger_rows()], dtype=np.float32)


def test_trees_predict_equals_xgboost_on_titanic():
    x = titanic_rows()
    x[::7, 3] = np.nan  # missing ages
    booster = xgboost.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    for path in (MODELS / "titanic" / "model.json", MODELS / "titanic"):
        model = wirespeed.trees.load(path)
        assert model.num_features == 12
        np.testing.assert_array_equal(model.predict(x), booster.inplace_predict(x))
        np.testing.assert_array_equal(model.predict_margin(x), booster.inplace_predict(x, predict_type="margin"))
        # One row as a 1-d array.
        np.testing.assert_array_equal(model.predict(x[0]), booster.inplace_predict(x[:1]))


def test_trees_large_batches_on_threads_equal_xgboost():
    booster = xgboost.Booster(model_file=str(MODELS / "titanic_large" / "model.json"))
    model = wirespeed.trees.load(MODELS / "titanic_large" / "model.json")
    x = np.random.default_rng(5).random((20000, model.num_features), dtype=np.float32)
    np.testing.assert_array_equal(model.predict(x), booster.inplace_predict(x))
    # float64 and non-contiguous rows are converted first.
    np.testing.assert_array_equal(model.predict(x[::2].astype(np.float64)), booster.inplace_predict(x[::2]))


@pytest.mark.parametrize("objective", ["binary", "regression", "multiclass"])
def test_trees_predict_equals_lightgbm(objective, tmp_path):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3000, 6))
    x[rng.random(x.shape) < 0.1] = np.nan
    z = np.nan_to_num(x[:, 0]) - np.nan_to_num(x[:, 1]) ** 2
    params = {"objective": objective, "verbose": -1, "num_threads": 1}
    if objective == "binary":
        y = (z > 0).astype(float)
    elif objective == "multiclass":
        y = np.digitize(z, [-1, 0]).astype(float)
        params["num_class"] = 3
    else:
        y = z
    booster = lgb.train(params, lgb.Dataset(x, y), num_boost_round=30)
    path = tmp_path / "model.txt"
    booster.save_model(str(path))
    model = wirespeed.trees.load(path)
    test = x[:500].astype(np.float32)
    want = booster.predict(test.astype(np.float64))
    got = model.predict(test)
    assert got.shape == want.shape
    # lightgbm sums in double and returns doubles; wirespeed rounds once to float32.
    np.testing.assert_array_equal(got, want.astype(np.float32))
    np.testing.assert_array_equal(model.predict_margin(test), booster.predict(test.astype(np.float64), raw_score=True).astype(np.float32))


def test_predict_records_applies_the_folders_preprocessing():
    rows = passenger_rows()[:200]
    params = load_params()
    x = np.array([features(r, params) for r in rows], dtype=np.float32)
    booster = xgboost.Booster(model_file=str(MODELS / "titanic_raw" / "model.json"))
    model = wirespeed.trees.load(MODELS / "titanic_raw")
    assert model.columns == ["Pclass", "Sex", "Age", "SibSp", "Parch", "Fare", "Cabin", "Embarked"]
    columns = {}
    for name in ("Pclass", "Age", "SibSp", "Parch", "Fare"):
        columns[name] = np.array([float(r[name]) if r[name].strip() else np.nan for r in rows], dtype=np.float32)
    for name in ("Sex", "Cabin", "Embarked"):
        columns[name] = np.array([r[name] for r in rows], dtype=object)
    np.testing.assert_array_equal(model.predict_records(columns), booster.inplace_predict(x))
    del columns["Fare"]
    with pytest.raises(ValueError, match="column 'Fare' is missing"):
        model.predict_records(columns)
    with pytest.raises(ValueError, match="no preprocessing"):
        wirespeed.trees.load(MODELS / "titanic" / "model.json").predict_records(columns)


def test_trees_refuse_what_they_cannot_predict(tmp_path):
    model = wirespeed.trees.load(MODELS / "titanic")
    with pytest.raises(ValueError, match=r"takes 12 features per row"):
        model.predict(np.zeros((3, 11), np.float32))
    with pytest.raises(TypeError):
        model.predict([[0.0] * 12])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json"):
        wirespeed.trees.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="missing.json"):
        wirespeed.trees.load(tmp_path / "missing.json")


def test_the_wheel_installs_the_wirespeed_command():
    scripts = Path(sys.executable).parent
    installed = scripts / "wirespeed"
    assert installed.is_file()
    version = subprocess.run([str(installed), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"wirespeed {wirespeed.__version__}"
    module = subprocess.run([sys.executable, "-m", "wirespeed", "--version"], capture_output=True, text=True, check=True)
    assert module.stdout == version.stdout


def test_the_package_is_typed():
    package = Path(wirespeed.__file__).parent
    assert (package / "py.typed").is_file()
    for stub in ("__init__.pyi", "trees.pyi", "_wirespeed.pyi", "client/__init__.pyi"):
        assert (package / stub).is_file()
