"""TF Serving's `:classify` and `:regress` on tree models, driven with
`requests` as TF Serving's REST users send them, and checked against the
real xgboost and lightgbm packages and against the same model's `:predict`.

TF Serving's shapes, from its REST API and json_tensor.cc: the request is
`{"signature_name", "context", "examples"}`; classify answers
`{"results": [[[label, score], ...], ...]}`, one list per example, and
regress `{"results": [value, ...]}`. A binary classifier's classes are
"0" and "1" with scores 1 - p and p, as TF's binary heads export them, and
it regresses to p.
"""

import json
import shutil

import lightgbm as lgb
import numpy as np
import pytest
import requests
import xgboost as xgb

from conftest import MODELS, RunningServer
from test_binary_http import write_repo
from titanic import features, load_params, passenger_rows

FEATURES = 6
CLASSES = 3


def tree_config(backend, model_file, width):
    shape = "[-1]" if width == 1 else f"[-1, {width}]"
    return (f'backend = "{backend}"\nmodel_file = "{model_file}"\n'
            f'[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, {FEATURES}]\n'
            f'[[outputs]]\nname = "y"\ndatatype = "FP32"\nshape = {shape}\nkind = "prediction"\n')


def training_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2000, FEATURES)).astype(np.float32)
    z = x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 2] ** 2 + rng.normal(scale=0.3, size=2000)
    return x, z


@pytest.fixture(scope="module")
def boosters(tmp_path_factory):
    """Trained models and a repository serving them, with the bundled
    Titanic models and an identity model (which has no heads)."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(MODELS / "titanic", root / "titanic")
    shutil.copytree(MODELS / "titanic_raw", root / "titanic_raw")
    write_repo(root, "echo", [("x", "FP32", f"[-1, {FEATURES}]")])
    x, z = training_data(7)
    trained = {}
    for name, objective, label, width in (
        ("softprob", "multi:softprob", np.digitize(z, [-0.5, 0.5]), CLASSES),
        ("softmax", "multi:softmax", np.digitize(z, [-0.5, 0.5]), 1),
        ("reg", "reg:squarederror", 3 * z + 1, 1),
    ):
        params = {"objective": objective, "max_depth": 4, "eta": 0.3, "nthread": 1, "seed": 1}
        if objective.startswith("multi"):
            params["num_class"] = CLASSES
        booster = xgb.train(params, xgb.DMatrix(x, label=label), 20)
        (root / name).mkdir()
        booster.save_model(str(root / name / "model.json"))
        (root / name / "config.toml").write_text(tree_config("xgboost", "model.json", width))
        trained[name] = booster
    lgb_model = lgb.train({"objective": "binary", "num_leaves": 8, "verbose": -1, "num_threads": 1},
                          lgb.Dataset(x, label=(z > 0.2).astype(np.float32)), 20)
    (root / "lgb_binary").mkdir()
    lgb_model.save_model(str(root / "lgb_binary" / "model.txt"))
    (root / "lgb_binary" / "config.toml").write_text(tree_config("lightgbm", "model.txt", 1))
    trained["lgb_binary"] = lgb_model
    trained["titanic"] = xgb.Booster(model_file=str(MODELS / "titanic" / "model.json"))
    server = RunningServer(root)
    yield server, trained
    server.stop()


@pytest.fixture(scope="module")
def rows():
    """Rows no model was trained on, as float32 and as JSON numbers."""
    return np.random.default_rng(99).normal(size=(40, FEATURES)).astype(np.float32)


def post(server, path, body):
    return requests.post(f"http://{server.address}{path}", json=body)


def examples(rows, name="x"):
    return [{name: r} for r in rows.tolist()]


def test_binary_classify_and_regress_match_xgboost_and_predict(boosters):
    server, trained = boosters
    params = load_params()
    x = np.array([features(r, params) for r in passenger_rows()[:30]], dtype=np.float32)
    want = trained["titanic"].predict(xgb.DMatrix(x))
    classified = post(server, "/v1/models/titanic:classify",
                      {"signature_name": "classification", "examples": examples(x, "features")})
    assert classified.status_code == 200, classified.text
    results = classified.json()["results"]
    assert len(results) == len(x)
    for (c0, c1), p in zip(results, want):
        assert c0[0] == "0" and c1[0] == "1"
        assert np.float32(c1[1]) == np.float32(p)
        assert np.float32(c0[1]) == np.float32(1) - np.float32(p)
    regressed = post(server, "/v1/models/titanic/versions/1:regress", {"examples": examples(x, "features")})
    assert regressed.status_code == 200, regressed.text
    np.testing.assert_array_equal(np.array(regressed.json()["results"], dtype=np.float32), want)
    predicted = post(server, "/v1/models/titanic:predict", {"instances": x.tolist()})
    np.testing.assert_array_equal(
        np.array([p["probability"] for p in predicted.json()["predictions"]], dtype=np.float32), want)


def test_nan_and_infinity_tokens_are_read_as_predict_reads_them(boosters):
    """Python's json.dumps writes NaN and Infinity as bare tokens, which TF
    Serving's REST API takes: :classify and :regress read them as :predict
    does, a missing value going down each tree's default branch."""
    server, trained = boosters
    params = load_params()
    x = np.array([features(r, params) for r in passenger_rows()[:6]], dtype=np.float32)
    x[0, 0] = np.nan
    x[1, 3] = np.inf
    x[2, 5] = -np.inf
    body = json.dumps({"examples": examples(x, "features")})
    assert "NaN" in body and "-Infinity" in body
    predicted = requests.post(f"http://{server.address}/v1/models/titanic:predict",
                              data=json.dumps({"instances": x.tolist()}))
    assert predicted.status_code == 200, predicted.text
    want = np.array([p["probability"] for p in predicted.json()["predictions"]], dtype=np.float32)
    # xgboost itself (which refuses infinities) on the rows with NaN only.
    finite = np.isfinite(x) | np.isnan(x)
    plain = finite.all(axis=1)
    np.testing.assert_array_equal(want[plain], trained["titanic"].predict(xgb.DMatrix(x[plain], missing=np.nan)))
    for verb in ("regress", "classify"):
        answer = requests.post(f"http://{server.address}/v1/models/titanic:{verb}", data=body)
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        got = results if verb == "regress" else [c1[1] for _, c1 in results]
        np.testing.assert_array_equal(np.array(got, dtype=np.float32), want)
    # The same tokens in a BYTES-free integer place are still refused by name,
    # and a string "NaN" stays a string.
    bad = requests.post(f"http://{server.address}/v1/models/titanic:regress",
                        data='{"examples": [{"features": ["NaN"]}]}')
    assert bad.status_code == 400 and "got a string" in bad.json()["error"], bad.text


def test_multiclass_probabilities_and_labels(boosters, rows):
    server, trained = boosters
    answer = post(server, "/v1/models/softprob:classify", {"examples": examples(rows)})
    assert answer.status_code == 200, answer.text
    want = trained["softprob"].predict(xgb.DMatrix(rows))
    for got, probabilities in zip(answer.json()["results"], want):
        assert [label for label, _ in got] == [str(c) for c in range(CLASSES)]
        np.testing.assert_array_equal(np.array([s for _, s in got], dtype=np.float32), probabilities)
    # multi:softmax predicts one class and no score, as a TF classification
    # signature with `classes` and no `scores` answers.
    answer = post(server, "/v1/models/softmax:classify", {"examples": examples(rows)})
    assert answer.status_code == 200, answer.text
    want = trained["softmax"].predict(xgb.DMatrix(rows))
    assert answer.json()["results"] == [[[str(int(c)), 0.0]] for c in want]
    assert len(set(want)) > 1, "a degenerate model proves nothing"


def test_regression_matches_xgboost(boosters, rows):
    server, trained = boosters
    answer = post(server, "/v1/models/reg:regress", {"signature_name": "regression", "examples": examples(rows)})
    assert answer.status_code == 200, answer.text
    np.testing.assert_array_equal(np.array(answer.json()["results"], dtype=np.float32),
                                  trained["reg"].predict(xgb.DMatrix(rows)))


def test_a_large_body_is_decoded_on_the_pool_with_the_same_answers(boosters):
    """Past 64 KiB the examples are decoded on the CPU pool."""
    server, trained = boosters
    many = np.random.default_rng(5).normal(size=(3000, FEATURES)).astype(np.float32)
    body = {"examples": examples(many)}
    assert len(requests.models.complexjson.dumps(body)) > 64 * 1024
    answer = post(server, "/v1/models/reg:regress", body)
    assert answer.status_code == 200, answer.text
    np.testing.assert_array_equal(np.array(answer.json()["results"], dtype=np.float32),
                                  trained["reg"].predict(xgb.DMatrix(many)))


def test_lightgbm_binary_classifies(boosters, rows):
    server, trained = boosters
    answer = post(server, "/v1/models/lgb_binary:classify", {"examples": examples(rows)})
    assert answer.status_code == 200, answer.text
    want = trained["lgb_binary"].predict(rows)
    got = np.array([c1[1] for _, c1 in answer.json()["results"]], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_columns_context_and_missing_features_on_a_preprocessing_model(boosters):
    """titanic_raw takes one input per CSV column. Every example shares the
    context's `Pclass`; an empty CSV field is left out of its example, and
    the model's `fill` (numbers) and unknown-string rule (strings) read it
    as the Go benchmark's struct decoding does."""
    server, trained = boosters
    params = load_params()
    passengers = [r for r in passenger_rows() if r["Pclass"] == "3"][:30]
    numbers = ("Age", "SibSp", "Parch", "Fare")
    sent = []
    for r in passengers:
        example = {k: float(r[k]) for k in numbers if r[k].strip()}
        example.update({k: r[k] for k in ("Sex", "Cabin", "Embarked") if r[k]})
        sent.append(example)
    assert any(len(e) < 7 for e in sent), "some passenger must have a missing field"
    answer = post(server, "/v1/models/titanic_raw:classify", {"context": {"Pclass": 3}, "examples": sent})
    assert answer.status_code == 200, answer.text
    x = np.array([features(r, params) for r in passengers], dtype=np.float32)
    want = trained["titanic"].predict(xgb.DMatrix(x))
    np.testing.assert_allclose(np.array([c1[1] for _, c1 in answer.json()["results"]], dtype=np.float32),
                               want, rtol=1e-6)
    # An example's own value wins over the context's.
    own = post(server, "/v1/models/titanic_raw:regress",
               {"context": {"Pclass": 1}, "examples": [dict(sent[0], Pclass=3)]})
    assert own.status_code == 200, own.text
    assert np.float32(own.json()["results"][0]) == np.float32(want[0])


@pytest.mark.parametrize("path,body,status,needle", [
    ("/v1/models/reg:classify", {"examples": [{"x": [0] * FEATURES}]}, 400, "it answers ':regress'"),
    ("/v1/models/softprob:regress", {"examples": [{"x": [0] * FEATURES}]}, 400, "no regression output"),
    ("/v1/models/echo:classify", {"examples": [{"x": [0] * FEATURES}]}, 400, "':predict' for every model"),
    ("/v1/models/reg:regress", {"examples": []}, 400, "'examples' is an empty list"),
    ("/v1/models/reg:regress", {"instances": [[0] * FEATURES]}, 400, "no 'examples'"),
    ("/v1/models/reg:regress", {"examples": [{"y": [0] * FEATURES}]}, 400, "feature 'y' is not an input"),
    ("/v1/models/reg:regress", {"examples": [{"x": [0, 1]}]}, 400, "has 2 value(s)"),
    ("/v1/models/reg:regress", {"examples": [{"x": ["a"] * FEATURES}]}, 400, "got a string"),
    ("/v1/models/reg:regress", {"examples": [{"x": [0] * FEATURES}], "signature_name": "nope"}, 400,
     "no signature named 'nope'"),
    ("/v1/models/nope:regress", {"examples": [{"x": [0] * FEATURES}]}, 404, "nope"),
    ("/v1/models/reg:explain", {"examples": []}, 501, "explainer"),
])
def test_mistakes_get_tf_serving_errors(boosters, path, body, status, needle):
    server, _ = boosters
    answer = post(server, path, body)
    assert answer.status_code == status, answer.text
    assert needle in answer.json()["error"], answer.text


def test_malformed_json_is_a_400_and_the_connection_stays_usable(boosters, rows):
    server, trained = boosters
    with requests.Session() as session:
        bad = session.post(f"http://{server.address}/v1/models/reg:regress", data=b'{"examples": [{"x": [1,')
        assert bad.status_code == 400, bad.text
        assert "error" in bad.json()
        good = session.post(f"http://{server.address}/v1/models/reg:regress", json={"examples": examples(rows[:2])})
        assert good.status_code == 200, good.text


def test_metadata_lists_the_heads_signatures(boosters):
    server, _ = boosters
    for model, expected in (("titanic", {"serving_default", "classification", "regression"}),
                            ("softprob", {"serving_default", "classification"}),
                            ("reg", {"serving_default", "regression"}),
                            ("echo", {"serving_default"})):
        answer = requests.get(f"http://{server.address}/v1/models/{model}/metadata")
        assert answer.status_code == 200, answer.text
        signatures = answer.json()["metadata"]["signature_def"]["signature_def"]
        assert set(signatures) == expected, model
    classification = requests.get(f"http://{server.address}/v1/models/softprob/metadata").json()[
        "metadata"]["signature_def"]["signature_def"]["classification"]
    assert classification["method_name"] == "tensorflow/serving/classify"
    assert classification["outputs"]["scores"]["tensor_shape"]["dim"][1]["size"] == str(CLASSES)


# -- gRPC: Classify, Regress and MultiInference, by a grpcio client on TF
# Serving's published messages (tfserving_protos.py) and by grpcurl.


@pytest.fixture(scope="module")
def tf():
    import grpc

    from tfserving_protos import load

    _, message = load()
    return grpc, message


def grpc_call(tf, server, method, request_type, response_type):
    grpc, message = tf
    channel = grpc.insecure_channel(server.grpc_address)
    return channel.unary_unary(
        f"/tensorflow.serving.PredictionService/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=message(f"tensorflow.serving.{response_type}").FromString,
    )


def fill_examples(examples, rows, name="x"):
    for row in rows:
        examples.add().features.feature[name].float_list.value.extend(row.tolist())


def test_grpc_classify_and_regress_match_xgboost(boosters, tf, rows):
    server, trained = boosters
    _, message = tf
    classify = grpc_call(tf, server, "Classify", "ClassificationRequest", "ClassificationResponse")
    request = message("tensorflow.serving.ClassificationRequest")()
    request.model_spec.name = "softprob"
    fill_examples(request.input.example_list.examples, rows)
    response = classify(request, timeout=30)
    assert response.model_spec.name == "softprob" and response.model_spec.version.value == 1
    want = trained["softprob"].predict(xgb.DMatrix(rows))
    assert len(response.result.classifications) == len(rows)
    for got, probabilities in zip(response.result.classifications, want):
        assert [c.label for c in got.classes] == [str(c) for c in range(CLASSES)]
        np.testing.assert_array_equal(np.array([c.score for c in got.classes], dtype=np.float32), probabilities)

    regress = grpc_call(tf, server, "Regress", "RegressionRequest", "RegressionResponse")
    request = message("tensorflow.serving.RegressionRequest")()
    request.model_spec.name = "reg"
    request.model_spec.signature_name = "regression"
    fill_examples(request.input.example_list.examples, rows)
    response = regress(request, timeout=30)
    np.testing.assert_array_equal(np.array([r.value for r in response.result.regressions], dtype=np.float32),
                                  trained["reg"].predict(xgb.DMatrix(rows)))


def test_grpc_context_and_typed_features_on_a_preprocessing_model(boosters, tf):
    """Int64, float and bytes features, with a context, answer what REST's
    :classify answers for the same passengers."""
    server, _ = boosters
    _, message = tf
    passengers = [r for r in passenger_rows() if r["Pclass"] == "2"][:20]
    request = message("tensorflow.serving.ClassificationRequest")()
    request.model_spec.name = "titanic_raw"
    request.input.example_list_with_context.context.features.feature["Pclass"].int64_list.value.append(2)
    rest_examples = []
    for r in passengers:
        features = request.input.example_list_with_context.examples.add().features.feature
        example = {}
        for k in ("Age", "SibSp", "Parch", "Fare"):
            if r[k].strip():
                features[k].float_list.value.append(float(r[k]))
                example[k] = float(np.float32(r[k]))
        for k in ("Sex", "Cabin", "Embarked"):
            if r[k]:
                features[k].bytes_list.value.append(r[k].encode())
                example[k] = r[k]
        rest_examples.append(example)
    classify = grpc_call(tf, server, "Classify", "ClassificationRequest", "ClassificationResponse")
    response = classify(request, timeout=30)
    got = [[(c.label, c.score) for c in cs.classes] for cs in response.result.classifications]
    rest = post(server, "/v1/models/titanic_raw:classify", {"context": {"Pclass": 2}, "examples": rest_examples})
    assert rest.status_code == 200, rest.text
    assert [[(label, np.float32(score)) for label, score in cs] for cs in rest.json()["results"]] == got


def test_grpc_multi_inference_runs_both_tasks_once(boosters, tf):
    server, trained = boosters
    _, message = tf
    params = load_params()
    x = np.array([features(r, params) for r in passenger_rows()[:10]], dtype=np.float32)
    want = trained["titanic"].predict(xgb.DMatrix(x))
    multi = grpc_call(tf, server, "MultiInference", "MultiInferenceRequest", "MultiInferenceResponse")
    request = message("tensorflow.serving.MultiInferenceRequest")()
    for signature, method in (("classification", "tensorflow/serving/classify"),
                              ("regression", "tensorflow/serving/regress")):
        task = request.tasks.add()
        task.model_spec.name = "titanic"
        task.model_spec.signature_name = signature
        task.method_name = method
    fill_examples(request.input.example_list.examples, x, "features")
    response = multi(request, timeout=30)
    classification, regression = response.results
    assert classification.model_spec.signature_name == "classification"
    np.testing.assert_array_equal(
        np.array([cs.classes[1].score for cs in classification.classification_result.classifications],
                 dtype=np.float32), want)
    np.testing.assert_array_equal(
        np.array([r.value for r in regression.regression_result.regressions], dtype=np.float32), want)


def test_grpc_mistakes_are_invalid_argument(boosters, tf):
    import grpc

    server, _ = boosters
    _, message = tf
    regress = grpc_call(tf, server, "Regress", "RegressionRequest", "RegressionResponse")

    def fails(request, code, needle):
        with pytest.raises(grpc.RpcError) as failure:
            regress(request, timeout=30)
        assert failure.value.code() == code, failure.value.details()
        assert needle in failure.value.details(), failure.value.details()

    request = message("tensorflow.serving.RegressionRequest")()
    request.model_spec.name = "reg"
    fails(request, grpc.StatusCode.INVALID_ARGUMENT, "no input")
    request.input.example_list.examples.add().features.feature["nope"].float_list.value.append(1)
    fails(request, grpc.StatusCode.INVALID_ARGUMENT, "feature 'nope' is not an input")
    request = message("tensorflow.serving.RegressionRequest")()
    request.model_spec.name = "reg"
    request.input.example_list.examples.add().features.feature["x"].bytes_list.value.append(b"a")
    fails(request, grpc.StatusCode.INVALID_ARGUMENT, "got a string")
    request.model_spec.name = "softprob"
    fails(request, grpc.StatusCode.INVALID_ARGUMENT, "no regression output")
    request.model_spec.name = "nope"
    fails(request, grpc.StatusCode.NOT_FOUND, "nope")
    multi = grpc_call(tf, server, "MultiInference", "MultiInferenceRequest", "MultiInferenceResponse")
    request = message("tensorflow.serving.MultiInferenceRequest")()
    for model in ("reg", "softprob"):
        task = request.tasks.add()
        task.model_spec.name = model
        task.method_name = "tensorflow/serving/regress"
    with pytest.raises(grpc.RpcError) as failure:
        multi(request, timeout=30)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "same model" in failure.value.details()


def test_grpcurl_classifies_by_reflection(boosters, rows):
    """grpcurl finds Classify through server reflection and sends JSON."""
    import json
    import subprocess

    from test_grpc import grpcurl

    server, trained = boosters
    body = {"model_spec": {"name": "softprob"},
            "input": {"example_list": {"examples": [
                {"features": {"feature": {"x": {"float_list": {"value": rows[0].tolist()}}}}}]}}}
    out = subprocess.run([grpcurl(), "-plaintext", "-d", json.dumps(body), server.grpc_address,
                          "tensorflow.serving.PredictionService/Classify"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    (classes,) = json.loads(out.stdout)["result"]["classifications"]
    want = trained["softprob"].predict(xgb.DMatrix(rows[:1]))[0]
    np.testing.assert_array_equal(np.array([c["score"] for c in classes["classes"]], dtype=np.float32), want)
