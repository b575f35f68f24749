"""`titanic_raw`: raw passenger records in, the same answer as `titanic`
fed the features computed in Python per tests/data/titanic/README.txt."""

import numpy as np
import pytest
import tritonclient.http as httpclient

from titanic import features, load_params, passenger_rows

NUMBERS = ["Pclass", "Age", "SibSp", "Parch", "Fare"]
STRINGS = ["Sex", "Cabin", "Embarked"]


@pytest.fixture(scope="module")
def client(demo_server):
    return httpclient.InferenceServerClient(url=demo_server.address)


def raw_inputs(rows, binary):
    inputs = []
    for name in NUMBERS:
        # A missing number is NaN on the wire; the model reads it as 0.
        column = np.array([float(r[name]) if r[name].strip() else np.nan for r in rows], dtype=np.float32)
        inp = httpclient.InferInput(name, [len(rows)], "FP32")
        inp.set_data_from_numpy(column, binary_data=binary)
        inputs.append(inp)
    for name in STRINGS:
        column = np.array([r[name].encode() for r in rows], dtype=np.object_)
        inp = httpclient.InferInput(name, [len(rows)], "BYTES")
        inp.set_data_from_numpy(column, binary_data=binary)
        inputs.append(inp)
    return inputs


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_raw_records_equal_python_features_through_titanic(client, binary):
    rows = passenger_rows()[:100]
    params = load_params()
    x = np.array([features(r, params) for r in rows], dtype=np.float32)
    reference = httpclient.InferInput("features", list(x.shape), "FP32")
    reference.set_data_from_numpy(x)
    want = client.infer("titanic", [reference])
    got = client.infer("titanic_raw", raw_inputs(rows, binary))
    for output in ("probability", "margin"):
        np.testing.assert_array_equal(got.as_numpy(output), want.as_numpy(output))
    # Not a constant: the passengers get different answers.
    assert np.unique(got.as_numpy("probability")).size > 5


def test_raw_model_metadata_lists_the_columns(client):
    meta = client.get_model_metadata("titanic_raw")
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
        ("Pclass", "FP32", [-1]), ("Sex", "BYTES", [-1]), ("Age", "FP32", [-1]), ("SibSp", "FP32", [-1]),
        ("Parch", "FP32", [-1]), ("Fare", "FP32", [-1]), ("Cabin", "BYTES", [-1]), ("Embarked", "BYTES", [-1]),
    ]


def test_columns_of_different_lengths_are_refused(client):
    rows = passenger_rows()[:3]
    inputs = raw_inputs(rows, True)
    short = httpclient.InferInput("Age", [2], "FP32")
    short.set_data_from_numpy(np.array([1, 2], dtype=np.float32))
    inputs[1] = short
    with pytest.raises(Exception) as err:
        client.infer("titanic_raw", inputs)
    assert "same number of rows" in str(err.value)
