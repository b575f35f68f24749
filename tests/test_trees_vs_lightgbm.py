"""Differential tests of the tree runtime against the real lightgbm package.

Random models are trained for binary, regression and multiclass, with NaNs,
zero-as-missing, categorical features (tested with unseen, negative and
fractional categories) and deep, wide trees; saved with `save_model`; and
predicted by wirespeed on thousands of rows, offline through `wirespeed
predict` and through the server with tritonclient's binary tensors (which,
unlike JSON, carry NaN).
"""

import shutil

import lightgbm as lgb
import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import RunningServer, run_wirespeed

FEATURES = 8
CATEGORICAL = [6, 7]
CLASSES = 3

# (name, objective parameters, extra training parameters)
CASES = [
    ("binary", {"objective": "binary"}, {}),
    ("binary-sigmoid2", {"objective": "binary", "sigmoid": 2.0}, {}),
    ("regression", {"objective": "regression"}, {}),
    ("regression-zero-missing", {"objective": "regression"}, {"zero_as_missing": True}),
    ("regression-no-missing", {"objective": "regression"}, {"use_missing": False}),
    ("huber", {"objective": "huber"}, {}),
    ("multiclass", {"objective": "multiclass", "num_class": CLASSES}, {}),
    ("deep-wide", {"objective": "regression"}, {"num_leaves": 255, "max_depth": -1, "min_data_in_leaf": 2}),
]


def data(rng, rows, nan_fraction, test=False):
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    for c in CATEGORICAL:
        cats = rng.integers(0, 12, size=rows).astype(np.float32)
        if test:
            # Unseen, negative and fractional categories, as a client may send.
            odd = rng.random(rows)
            cats[odd < 0.05] = 40
            cats[(odd >= 0.05) & (odd < 0.08)] = -3
            cats[(odd >= 0.08) & (odd < 0.11)] = -0.5
            cats[(odd >= 0.11) & (odd < 0.14)] = 2.7
        x[:, c] = cats
    x[rng.random(x.shape) < nan_fraction] = np.nan
    # Exact zeros, for zero-as-missing.
    x[rng.random(x.shape) < 0.05] = 0.0
    return x


def labels(name, x, rng):
    z = np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) - 0.3 * np.nan_to_num(x[:, 2]) ** 2
    z = z + 0.4 * (np.nan_to_num(x[:, 6]) % 3 == 1) + rng.normal(scale=0.3, size=z.shape)
    if name.startswith("binary"):
        return (z > 0.2).astype(np.float64)
    if name == "multiclass":
        return np.digitize(z, [-0.5, 0.5]).astype(np.float64)
    return 3 * z + 1


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Every case trained once: {name: (booster, model folder)}."""
    root = tmp_path_factory.mktemp("lgb")
    models = {}
    for i, (name, objective, extra) in enumerate(CASES):
        rng = np.random.default_rng(2000 + i)
        x = data(rng, 4000, 0.15)
        params = {**objective, "num_leaves": 31, "learning_rate": 0.2, "num_threads": 1, "seed": i,
                  "verbose": -1, "min_data_per_group": 5, "cat_smooth": 1, **extra}
        train = lgb.Dataset(x.astype(np.float64), label=labels(name, x, rng), categorical_feature=CATEGORICAL)
        booster = lgb.train(params, train, num_boost_round=30)
        folder = root / name
        folder.mkdir()
        booster.save_model(str(folder / "model.txt"))
        models[name] = (booster, folder)
    return models


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_offline_predictions_match_lightgbm(trained, tmp_path, name):
    booster, folder = trained[name]
    x = data(np.random.default_rng(hash(name) % 1000), 5000, 0.2, test=True)
    csv = tmp_path / "rows.csv"
    np.savetxt(csv, x, delimiter=",", fmt="%.9g")
    model_text = (folder / "model.txt").read_text()
    if name != "regression-no-missing":
        assert "cat_threshold" in model_text, "the model has categorical splits"
    for kind, raw in (("prediction", False), ("margin", True)):
        want = booster.predict(x.astype(np.float64), raw_score=raw, num_threads=1)
        result = run_wirespeed("predict", "--model", folder / "model.txt", "--input", csv, "--output", kind)
        assert result.returncode == 0, result.stderr
        got = np.array([[float(v) for v in line.split(",")] for line in result.stdout.split()], dtype=np.float32)
        got = got.reshape(want.shape)
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=0, err_msg=f"{name} {kind}")
        # In fact each is LightGBM's double rounded once to float32.
        assert np.mean(got == want.astype(np.float32)) > 0.999, f"{name} {kind}"


def test_served_lightgbm_model_matches_with_nan_over_binary_tensors(trained, tmp_path):
    booster, folder = trained["multiclass"]
    repo = tmp_path / "repo"
    (repo / "lgb").mkdir(parents=True)
    shutil.copy(folder / "model.txt", repo / "lgb" / "model.txt")
    (repo / "lgb" / "config.toml").write_text(
        'backend = "lightgbm"\nmodel_file = "model.txt"\n'
        f'[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, {FEATURES}]\n'
        f'[[outputs]]\nname = "p"\ndatatype = "FP32"\nshape = [-1, {CLASSES}]\nkind = "prediction"\n'
        f'[[outputs]]\nname = "m"\ndatatype = "FP32"\nshape = [-1, {CLASSES}]\nkind = "margin"\n')
    server = RunningServer(repo)
    try:
        client = httpclient.InferenceServerClient(url=server.address)
        x = data(np.random.default_rng(7), 2000, 0.2, test=True)
        inp = httpclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("lgb", [inp])
        want = booster.predict(x.astype(np.float64), num_threads=1)
        np.testing.assert_allclose(result.as_numpy("p"), want.astype(np.float32), rtol=1e-6, atol=0)
        margins = booster.predict(x.astype(np.float64), raw_score=True, num_threads=1)
        np.testing.assert_allclose(result.as_numpy("m"), margins.astype(np.float32), rtol=1e-6, atol=0)
        assert client.get_model_metadata("lgb")["platform"] == "lightgbm_text"
    finally:
        server.stop()


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda t: t[: t.index("end of trees")], "ends before"),
        (lambda t: t[: len(t) // 2], "tree"),
        (lambda t: t.replace("left_child=", "left_child=99 ", 1), "left_child"),
        (lambda t: t.replace("split_feature=", "split_feature=1000 ", 1), "split_feature"),
        (lambda t: t.replace("max_feature_idx=7", "max_feature_idx=1"), "feature"),
        (lambda t: t.replace("objective=regression", "objective=lambdarank"), "lambdarank"),
    ],
)
def test_malformed_lightgbm_files_are_refused_by_name(trained, tmp_path, mutate, words):
    _, folder = trained["regression"]
    bad = tmp_path / "bad.txt"
    bad.write_text(mutate((folder / "model.txt").read_text()))
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(["0"] * FEATURES) + "\n")
    result = run_wirespeed("predict", "--model", bad, "--input", rows)
    assert result.returncode != 0
    assert str(bad) in result.stderr and words in result.stderr, result.stderr
    assert "panicked" not in result.stderr
