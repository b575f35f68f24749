"""Differential tests of the tree runtime against the real xgboost package.

Small random models are trained for every supported objective, with NaNs in
training and test data, saved as JSON, and predicted by wirespeed on
thousands of rows: offline through `wirespeed predict` (which can carry NaN)
and through the server with tritonclient (JSON carries no NaN, so those rows
have none).
"""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
import xgboost as xgb

from conftest import RunningServer, run_wirespeed

FEATURES = 10
CLASSES = 4

# (objective, extra training parameters)
CASES = [
    ("binary:logistic", {}),
    ("binary:logistic", {"base_score": 0.3}),
    ("binary:logitraw", {}),
    ("reg:squarederror", {}),
    ("reg:squarederror", {"base_score": -2.5, "max_depth": 8}),
    ("reg:logistic", {}),
    ("multi:softprob", {"num_class": CLASSES}),
    ("multi:softmax", {"num_class": CLASSES}),
]
IDS = [obj + ("+" + ",".join(f"{k}={v}" for k, v in extra.items() if k != "num_class") if len(extra) > ("num_class" in extra) else "") for obj, extra in CASES]


def data(rng, rows, nan_fraction):
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    x[rng.random(x.shape) < nan_fraction] = np.nan
    return x


def labels(objective, x, rng):
    z = np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) - 0.3 * np.nan_to_num(x[:, 2]) ** 2
    z = z + rng.normal(scale=0.3, size=z.shape)
    if objective.startswith("binary"):
        return (z > 0.2).astype(np.float32)
    if objective == "reg:logistic":
        return 1 / (1 + np.exp(-z))
    if objective.startswith("multi"):
        return np.digitize(z, [-1, 0, 1]).astype(np.float32)
    return 3 * z + 1


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Every case trained once: {index: (booster, path to model.json)}."""
    root = tmp_path_factory.mktemp("models")
    models = {}
    for i, (objective, extra) in enumerate(CASES):
        rng = np.random.default_rng(1000 + i)
        x = data(rng, 3000, 0.15)
        params = {"objective": objective, "max_depth": 5, "eta": 0.3, "nthread": 1, "seed": i, **extra}
        booster = xgb.train(params, xgb.DMatrix(x, label=labels(objective, x, rng), missing=np.nan), 25)
        folder = root / f"case{i}"
        folder.mkdir()
        booster.save_model(str(folder / "model.json"))
        models[i] = (booster, folder)
    return models


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_offline_predictions_match_xgboost_with_missing_values(trained, tmp_path, case):
    booster, folder = trained[case]
    x = data(np.random.default_rng(case), 5000, 0.2)
    csv = tmp_path / "rows.csv"
    np.savetxt(csv, x, delimiter=",", fmt="%.9g")  # 9 digits round-trip float32; nan -> "nan"
    for kind, margin in (("prediction", False), ("margin", True)):
        want = booster.predict(xgb.DMatrix(x, missing=np.nan), output_margin=margin)
        result = run_wirespeed("predict", "--model", folder / "model.json", "--input", csv, "--output", kind)
        assert result.returncode == 0, result.stderr
        got = np.loadtxt(result.stdout.splitlines(), delimiter=",", dtype=np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{CASES[case][0]} {kind}")
        assert np.unique(got).size > 3, "a degenerate model proves nothing"


def config_for(objective):
    """A config.toml exposing prediction and margin with this objective's shapes."""
    margin_width = CLASSES if objective.startswith("multi") else 1
    pred_width = CLASSES if objective == "multi:softprob" else 1
    shape = lambda w: "[-1]" if w == 1 else f"[-1, {w}]"
    return f"""backend = "xgboost"
model_file = "model.json"
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1, {FEATURES}]
[[outputs]]
name = "prediction"
datatype = "FP32"
shape = {shape(pred_width)}
kind = "prediction"
[[outputs]]
name = "margin"
datatype = "FP32"
shape = {shape(margin_width)}
kind = "margin"
"""


def test_served_predictions_match_xgboost(trained):
    for i, (_, folder) in trained.items():
        (folder / "config.toml").write_text(config_for(CASES[i][0]))
    server = RunningServer(next(iter(trained.values()))[1].parent)
    try:
        client = httpclient.InferenceServerClient(url=server.address)
        for i, (booster, _) in trained.items():
            # Odd cases send 10,000 rows (binary, with NaN), which the server
            # predicts on all cores; even ones 2,000 rows of JSON.
            big = i % 2 == 1
            x = data(np.random.default_rng(100 + i), 10_000 if big else 2000, 0.2 if big else 0.0)
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=big)
            outs = [httpclient.InferRequestedOutput(n, binary_data=False) for n in ("prediction", "margin")]
            result = client.infer(f"case{i}", [inp], outputs=outs)
            for name, margin in (("prediction", False), ("margin", True)):
                want = booster.predict(xgb.DMatrix(x, missing=np.nan), output_margin=margin)
                got = result.as_numpy(name)
                assert got.shape == want.shape, (CASES[i], name)
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{CASES[i]} {name}")
    finally:
        server.stop()


@pytest.mark.parametrize("onehot", [1, 64], ids=["partition", "one-hot"])
def test_categorical_splits_match_xgboost(tmp_path, onehot):
    """Categorical features, split by partition (max_cat_to_onehot=1) or
    one-hot; tested with unseen, negative, fractional and missing categories."""
    rng = np.random.default_rng(7 + onehot)
    n = 3000
    cat = rng.integers(0, 20, size=n).astype(np.float32)
    cat2 = rng.integers(0, 5, size=n).astype(np.float32)
    x = np.column_stack([cat, rng.normal(size=n), cat2]).astype(np.float32)
    x[rng.random(n) < 0.1, 0] = np.nan
    y = (cat % 3) * 2.0 + np.nan_to_num(x[:, 1]) + (cat2 == 2)
    booster = xgb.train(
        {"objective": "reg:squarederror", "max_cat_to_onehot": onehot, "nthread": 1, "max_depth": 6},
        xgb.DMatrix(x, label=y, feature_types=["c", "q", "c"], enable_categorical=True),
        20,
    )
    booster.save_model(str(tmp_path / "model.json"))
    trees = json.loads((tmp_path / "model.json").read_text())["learner"]["gradient_booster"]["model"]["trees"]
    assert any(t["categories_nodes"] for t in trees), "the model has categorical splits"
    test = np.column_stack([
        rng.choice([0, 3, 7, 19, 25, 100, -1, -0.5, 2.5, np.nan], size=4000),
        rng.normal(size=4000),
        rng.choice([0, 2, 4, 9, np.nan], size=4000),
    ]).astype(np.float32)
    csv = tmp_path / "rows.csv"
    np.savetxt(csv, test, delimiter=",", fmt="%.9g")
    want = booster.predict(xgb.DMatrix(test, feature_types=["c", "q", "c"], enable_categorical=True))
    result = run_wirespeed("predict", "--model", tmp_path / "model.json", "--input", csv)
    assert result.returncode == 0, result.stderr
    got = np.array([float(v) for v in result.stdout.split()], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_ubjson_models_match_xgboost(trained, tmp_path, case):
    """The same boosters saved as UBJSON (`.ubj`, XGBoost's default binary
    format) predict the same, NaNs included."""
    booster, _ = trained[case]
    model = tmp_path / "model.ubj"
    booster.save_model(str(model))
    assert model.read_bytes()[:1] == b"{" and model.read_bytes()[1:2] != b'"'
    x = data(np.random.default_rng(100 + case), 3000, 0.2)
    csv = tmp_path / "rows.csv"
    np.savetxt(csv, x, delimiter=",", fmt="%.9g")
    want = booster.predict(xgb.DMatrix(x, missing=np.nan))
    result = run_wirespeed("predict", "--model", model, "--input", csv)
    assert result.returncode == 0, result.stderr
    got = np.array([[float(v) for v in line.split(",")] for line in result.stdout.split()], dtype=np.float32)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=0)


def test_corrupt_ubjson_is_refused_by_name(trained, tmp_path):
    booster, _ = trained[0]
    model = tmp_path / "model.ubj"
    booster.save_model(str(model))
    bad = tmp_path / "bad.ubj"
    bad.write_bytes(model.read_bytes()[:-200])
    (tmp_path / "rows.csv").write_text(",".join(["0"] * FEATURES) + "\n")
    result = run_wirespeed("predict", "--model", bad, "--input", tmp_path / "rows.csv")
    assert result.returncode != 0 and "UBJSON at byte" in result.stderr, result.stderr
    assert "panicked" not in result.stderr
