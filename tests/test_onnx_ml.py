"""ONNX's machine-learning operators (`ai.onnx.ml`): scikit-learn models
converted by skl2onnx, XGBoost and LightGBM models converted by
onnxmltools, and tree ensembles written here with every branch mode,
aggregate function and post transform. wirespeed runs the tree nodes on
its own tree runtime and the rest with tract; every answer is checked
against onnxruntime's for the same file, through tritonclient HTTP and
gRPC."""

import lightgbm
import numpy as np
import onnx
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost
from onnx import TensorProto, helper
from onnxmltools import convert_lightgbm, convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType
from skl2onnx import to_onnx
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from conftest import RunningServer, run_wirespeed

FEATURES = 8
RNG = np.random.default_rng(11)
X, Y = make_classification(n_samples=600, n_features=FEATURES, n_informative=5, random_state=0)
X = X.astype(np.float32)
X3, Y3 = make_classification(n_samples=600, n_features=FEATURES, n_informative=5, n_classes=3, random_state=0)
X3 = X3.astype(np.float32)
XR, YR = make_regression(n_samples=600, n_features=FEATURES, noise=5.0, random_state=0)
XR = XR.astype(np.float32)
NO_ZIPMAP = {"zipmap": False}
FLOAT_INPUT = [("input", FloatTensorType([None, FEATURES]))]


def converted():
    """The converted models: name -> (model, its outputs)."""
    with_gaps = XR.copy()
    with_gaps[RNG.random(with_gaps.shape) < 0.1] = np.nan
    return {
        "pipeline": to_onnx(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(X3, Y3),
                            X3[:1], options=NO_ZIPMAP),
        "pipeline2": to_onnx(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(X, Y),
                             X[:1], options=NO_ZIPMAP),
        "svc": to_onnx(LinearSVC().fit(X3, Y3), X3[:1]),
        "svc2": to_onnx(LinearSVC().fit(X, Y), X[:1]),
        "forest": to_onnx(RandomForestClassifier(n_estimators=100, max_depth=10, random_state=0).fit(X, Y),
                          X[:1], options=NO_ZIPMAP),
        "forest3": to_onnx(RandomForestClassifier(n_estimators=30, random_state=0).fit(X3, Y3),
                           X3[:1], options=NO_ZIPMAP),
        "boosting": to_onnx(GradientBoostingRegressor(n_estimators=50, max_depth=3, random_state=0).fit(XR, YR),
                            XR[:1]),
        "imputed": to_onnx(make_pipeline(SimpleImputer(), StandardScaler(),
                                          RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0))
                           .fit(with_gaps, YR), with_gaps[:1]),
        "xgboost": convert_xgboost(xgboost.XGBClassifier(n_estimators=100, max_depth=6).fit(X, Y),
                                   initial_types=FLOAT_INPUT),
        "xgboost3": convert_xgboost(xgboost.XGBClassifier(n_estimators=30, max_depth=4).fit(X3, Y3),
                                    initial_types=FLOAT_INPUT),
        "lightgbm": convert_lightgbm(lightgbm.LGBMClassifier(n_estimators=50, verbose=-1).fit(X, Y),
                                     initial_types=FLOAT_INPUT, zipmap=False),
        "lightgbm3": convert_lightgbm(lightgbm.LGBMClassifier(n_estimators=30, verbose=-1).fit(X3, Y3),
                                      initial_types=FLOAT_INPUT, zipmap=False),
        "lightgbm_regressor": convert_lightgbm(lightgbm.LGBMRegressor(n_estimators=50, verbose=-1).fit(XR, YR),
                                               initial_types=FLOAT_INPUT),
    }


MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
# Feature values the synthetic trees split on, so that equality splits fire.
GRID = np.array([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=np.float32)


def synthetic_trees(rng, trees, depth, targets, weights_for=None, negative=True):
    """Random full trees of `depth` splits with every branch mode, NaN sent
    either way, thresholds from GRID: the nodes_* and leaf attributes.
    `weights_for` restricts the leaves' weights to those targets."""
    attrs = {k: [] for k in ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                             "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true"]}
    leaves = {k: [] for k in ["treeids", "nodeids", "ids", "weights"]}
    for t in range(trees):
        count = 2 ** (depth + 1) - 1
        for n in range(count):
            leaf = n >= 2 ** depth - 1
            attrs["nodes_treeids"].append(t)
            attrs["nodes_nodeids"].append(n)
            attrs["nodes_featureids"].append(0 if leaf else int(rng.integers(FEATURES)))
            attrs["nodes_values"].append(0.0 if leaf else float(rng.choice(GRID)))
            attrs["nodes_modes"].append("LEAF" if leaf else str(rng.choice(MODES)))
            attrs["nodes_truenodeids"].append(0 if leaf else 2 * n + 1)
            attrs["nodes_falsenodeids"].append(0 if leaf else 2 * n + 2)
            attrs["nodes_missing_value_tracks_true"].append(0 if leaf else int(rng.integers(2)))
            if leaf:
                for target in (weights_for if weights_for is not None else range(targets)):
                    if weights_for is None and rng.random() < 0.2:
                        continue  # some leaves leave some targets unscored
                    low = -1.0 if negative else 0.0
                    leaves["treeids"].append(t)
                    leaves["nodeids"].append(n)
                    leaves["ids"].append(int(target))
                    leaves["weights"].append(float(rng.uniform(low, 1.0)) / trees)
    return attrs, leaves


def ensemble_model(op, attrs, outputs):
    node = helper.make_node(op, ["X"], [name for name, _, _ in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def synthetic():
    """Regressors for every aggregate and transform, classifiers for the
    binary rules and every transform, string labels."""
    rng = np.random.default_rng(5)
    models = {}
    for aggregate in ["SUM", "AVERAGE", "MIN", "MAX"]:
        for post in ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]:
            for targets in [1, 3]:
                if targets == 1 and post not in ("NONE", "PROBIT", "LOGISTIC"):
                    continue
                nodes, leaves = synthetic_trees(rng, 12, 4, targets, negative=post != "PROBIT")
                attrs = dict(nodes, n_targets=targets, aggregate_function=aggregate, post_transform=post,
                             **{f"target_{k}": v for k, v in leaves.items()})
                if rng.random() < 0.7:
                    attrs["base_values"] = [float(v) for v in rng.uniform(-0.2, 0.2, targets)]
                models[f"reg_{aggregate}_{post}_{targets}".lower()] = ensemble_model(
                    "TreeEnsembleRegressor", attrs, [("Y", TensorProto.FLOAT, ["N", targets])])
    cases = [
        # (name, classes, weights_for, negative weights, base values, transforms)
        ("one_class_positive", 2, [1], False, None, ["NONE", "LOGISTIC", "PROBIT"]),
        ("one_class_mixed", 2, [0], True, [0.1], ["NONE", "LOGISTIC"]),
        ("one_class_two_bases", 2, [1], True, [0.1, 0.3], ["NONE", "LOGISTIC"]),
        ("both_classes", 2, None, False, None, ["NONE", "SOFTMAX", "LOGISTIC"]),
        ("both_classes_bases", 2, None, True, [0.2, -0.1], ["NONE", "LOGISTIC"]),
        ("three_classes", 3, None, True, [0.1, 0.0, -0.1], ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"]),
        ("three_unscored", 3, [0, 2], True, None, ["NONE", "SOFTMAX"]),
    ]
    for name, classes, weights_for, negative, base, posts in cases:
        for post in posts:
            nodes, leaves = synthetic_trees(rng, 10, 3, classes, weights_for, negative)
            attrs = dict(nodes, post_transform=post, classlabels_int64s=list(range(10, 10 + classes)),
                         **{f"class_{k}": v for k, v in leaves.items()})
            if base is not None:
                attrs["base_values"] = base
            models[f"cls_{name}_{post}".lower()] = ensemble_model(
                "TreeEnsembleClassifier", attrs,
                [("label", TensorProto.INT64, ["N"]), ("scores", TensorProto.FLOAT, ["N", classes])])
    nodes, leaves = synthetic_trees(rng, 10, 3, 3)
    attrs = dict(nodes, post_transform="SOFTMAX", classlabels_strings=["cat", "dog", "emu"],
                 **{f"class_{k}": v for k, v in leaves.items()})
    models["cls_strings"] = ensemble_model(
        "TreeEnsembleClassifier", attrs,
        [("label", TensorProto.STRING, ["N"]), ("scores", TensorProto.FLOAT, ["N", 3])])
    return models


def tree_ensemble_v5(rng, trees, depth, targets, aggregate, post, membership=False):
    """The ml opset 5 `TreeEnsemble`: indexed nodes and leaves, every
    comparison mode, random NaN tracking, and with `membership` set
    membership splits (mode 6) too."""
    a = {k: [] for k in ["modes", "splits", "features", "true", "false", "true_leaf", "false_leaf", "tracks"]}
    members, leaf_targets, leaf_weights, roots = [], [], [], []

    def build(level):
        if level == depth:
            leaf_targets.append(int(rng.integers(targets)))
            leaf_weights.append(float(rng.uniform(-1.0, 1.0)) / trees)
            return 1, len(leaf_weights) - 1
        i = len(a["modes"])
        for k in a:
            a[k].append(0)
        mode = int(rng.integers(7 if membership else 6))
        a["modes"][i] = mode
        a["features"][i] = int(rng.integers(FEATURES))
        a["tracks"][i] = int(rng.integers(2))
        if mode == 6:
            # ONNX Runtime takes whole-number members only.
            members.extend([float(v) for v in rng.choice([-1.0, 0.0, 1.0], size=2, replace=False)] + [np.nan])
        else:
            a["splits"][i] = float(rng.choice(GRID))
        a["true_leaf"][i], a["true"][i] = build(level + 1)
        a["false_leaf"][i], a["false"][i] = build(level + 1)
        return 0, i

    for _ in range(trees):
        roots.append(build(0)[1])
    attrs = dict(
        tree_roots=roots, nodes_featureids=a["features"], nodes_truenodeids=a["true"],
        nodes_falsenodeids=a["false"], nodes_trueleafs=a["true_leaf"], nodes_falseleafs=a["false_leaf"],
        nodes_missing_value_tracks_true=a["tracks"], leaf_targetids=leaf_targets, n_targets=targets,
        aggregate_function=aggregate, post_transform=post,
        nodes_modes=helper.make_tensor("nodes_modes", TensorProto.UINT8, [len(a["modes"])], a["modes"]),
        nodes_splits=helper.make_tensor("nodes_splits", TensorProto.FLOAT, [len(a["splits"])], a["splits"]),
        leaf_weights=helper.make_tensor("leaf_weights", TensorProto.FLOAT, [len(leaf_weights)], leaf_weights),
        membership_values=helper.make_tensor("membership_values", TensorProto.FLOAT, [len(members)], members),
    )
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "v5", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", targets])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


def one_leaf_model():
    """Opset 5's one-leaf tree: a split whose two branches are one leaf,
    beside a stump on feature 1."""
    attrs = dict(
        tree_roots=[0, 1], nodes_featureids=[0, 1], nodes_truenodeids=[0, 1], nodes_falsenodeids=[0, 2],
        nodes_trueleafs=[1, 1], nodes_falseleafs=[1, 1], leaf_targetids=[0, 0, 0], n_targets=1,
        nodes_modes=helper.make_tensor("nodes_modes", TensorProto.UINT8, [2], [0, 1]),
        nodes_splits=helper.make_tensor("nodes_splits", TensorProto.FLOAT, [2], [0.0, 0.0]),
        leaf_weights=helper.make_tensor("leaf_weights", TensorProto.FLOAT, [3], [0.75, 1.0, 2.0]))
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "leaf", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


def membership_model(tracks):
    """One set-membership split, {0, 1} on feature 0, and its two leaves."""
    attrs = dict(
        tree_roots=[0], nodes_featureids=[0], nodes_truenodeids=[0], nodes_falsenodeids=[1],
        nodes_trueleafs=[1], nodes_falseleafs=[1], nodes_missing_value_tracks_true=[tracks],
        leaf_targetids=[0, 0], n_targets=1,
        nodes_modes=helper.make_tensor("nodes_modes", TensorProto.UINT8, [1], [6]),
        nodes_splits=helper.make_tensor("nodes_splits", TensorProto.FLOAT, [1], [0.0]),
        leaf_weights=helper.make_tensor("leaf_weights", TensorProto.FLOAT, [2], [1.0, 2.0]),
        membership_values=helper.make_tensor("membership_values", TensorProto.FLOAT, [3], [0.0, 1.0, np.nan]))
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "member", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


def opset5():
    rng = np.random.default_rng(9)
    # post_transform 1 is SOFTMAX and 2 LOGISTIC in the specification, which
    # wirespeed follows; onnxruntime 1.32 reads them the other way round, so
    # the comparison keeps to NONE (0), SOFTMAX_ZERO (3) and PROBIT (4).
    models = {f"v5_{aggregate}_{post}_{targets}": tree_ensemble_v5(rng, 8, 4, targets, aggregate, post)
              for aggregate in range(4) for post, targets in [(0, 1), (0, 3), (3, 3), (4, 1)]}
    models.update({f"v5_member_{tracks}": membership_model(tracks) for tracks in (0, 1)})
    models["v5_one_leaf"] = one_leaf_model()
    return models


CONVERTED = converted()
# The models whose scores come from tract's linear algebra, not from trees.
LINEAR = {"pipeline", "pipeline2", "svc", "svc2"}
SYNTHETIC = {**synthetic(), **opset5()}


@pytest.fixture(scope="module")
def ml_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_ml")
    for name, model in {**CONVERTED, **SYNTHETIC}.items():
        folder = root / name
        folder.mkdir()
        onnx.save(model, folder / "model.onnx")
        (folder / "config.toml").write_text('backend = "onnx"\n')
    server = RunningServer(root)
    yield server, root
    server.stop()


def ask(server, module, name, x):
    """Every output of model `name` for rows `x`, through tritonclient."""
    address = server.address if module is httpclient else server.grpc_address
    client = module.InferenceServerClient(address)
    metadata = client.get_model_metadata(name)
    outputs = metadata["outputs"] if module is httpclient else [{"name": o.name} for o in metadata.outputs]
    inp = module.InferInput(input_name(name) if name in CONVERTED else "X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(name, [inp])
    return {o["name"]: result.as_numpy(o["name"]) for o in outputs}


def input_name(name):
    return CONVERTED[name].graph.input[0].name


def reference(root, name, x):
    # One thread: ONNX Runtime then adds the trees of a row in model order,
    # as wirespeed does; with more it may add them in two halves, which
    # moves the last bit of a sum.
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(root / name / "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
    values = session.run(None, {session.get_inputs()[0].name: x})
    return {o.name: v for o, v in zip(session.get_outputs(), values)}


def assert_same(got, want, name):
    assert sorted(got) == sorted(want), name
    for output, expected in want.items():
        answer = got[output]
        if expected.dtype == object:
            expected = expected.astype(str)
            answer = np.array([a.decode() for a in answer.ravel()]).reshape(answer.shape)
            assert (answer == expected).all(), (name, output)
            continue
        assert answer.shape == expected.shape, (name, output, answer.shape, expected.shape)
        if expected.dtype.kind in "iub" or name not in LINEAR:
            # The trees run on wirespeed's runtime with ONNX Runtime's
            # arithmetic: the same floats, bit for bit.
            np.testing.assert_array_equal(answer, expected, err_msg=f"{name} {output}")
        else:
            # tract's matrix products round differently from ONNX Runtime's.
            np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} {output}")


@pytest.mark.parametrize("name", sorted(CONVERTED))
@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_converted_models_match_onnxruntime(ml_server, name, rows, module):
    server, root = ml_server
    x = RNG.standard_normal((rows, FEATURES)).astype(np.float32)
    if name == "imputed":
        x[RNG.random(x.shape) < 0.2] = np.nan
    assert_same(ask(server, module, name, x), reference(root, name, x), name)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_every_mode_aggregate_and_transform_matches_onnxruntime(ml_server, name):
    server, root = ml_server
    # Values on and between the thresholds, and missing ones.
    x = RNG.choice(np.concatenate([GRID, GRID + 0.25, [np.nan]]), size=(70, FEATURES)).astype(np.float32)
    for rows in (x[:1], x):
        assert_same(ask(server, httpclient, name, rows), reference(root, name, rows), name)


def test_metadata_reads_the_converted_graph(ml_server):
    server, _ = ml_server
    metadata = httpclient.InferenceServerClient(server.address).get_model_metadata("forest")
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, FEATURES]}]
    assert [(o["name"], o["datatype"]) for o in metadata["outputs"]] == [("label", "INT64"), ("probabilities", "FP32")]
    strings = httpclient.InferenceServerClient(server.address).get_model_metadata("cls_strings")
    assert strings["outputs"][0]["datatype"] == "BYTES"


def test_too_few_features_get_a_400(ml_server):
    server, _ = ml_server
    answer = requests.post(f"http://{server.address}/v2/models/forest/infer", json={
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 5], "data": [0.0] * 5}]})
    assert answer.status_code == 400 and "Expected [-1,8], got [1,5]" in answer.json()["error"], answer.text


def test_double_inputs_without_onnx_runtime_are_a_load_error_that_says_what_to_do(tmp_path, monkeypatch):
    # tract's tree ensembles take float inputs; ONNX Runtime, which would
    # serve it, is not found (no ORT_DYLIB_PATH, no Python environment with
    # the onnxruntime package at hand, not on the loader's path).
    for name in ("ORT_DYLIB_PATH", "VIRTUAL_ENV", "WIRESPEED_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-python"))
    monkeypatch.setenv("HOME", str(tmp_path))
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(X, Y)
    for name, model, says in [
        ("doubles", to_onnx(forest, X[:1].astype(np.float64), options=NO_ZIPMAP), "float inputs"),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        onnx.save(model, folder / "model.onnx")
        out = run_wirespeed("serve", "--models", tmp_path, "--check")
        assert out.returncode != 0 and says in out.stderr, out.stderr
        (folder / "model.onnx").unlink()
        folder.rmdir()


def test_set_membership_follows_the_specification(ml_server, tmp_path):
    """Random trees with several membership splits, against a walk of the
    trees written here from the specification: onnxruntime 1.32 gives some
    such trees other answers (with one membership split a tree, as in
    v5_member_*, it agrees and is the reference)."""
    server, _ = ml_server
    model = tree_ensemble_v5(np.random.default_rng(3), 4, 3, 1, 1, 0, membership=True)
    folder = tmp_path / "members"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx")
    (folder / "config.toml").write_text('backend = "onnx"\n')
    attrs = {a.name: a for a in model.graph.node[0].attribute}
    ints = lambda name: list(attrs[name].ints)  # noqa: E731
    array = lambda name: onnx.numpy_helper.to_array(attrs[name].t).tolist()  # noqa: E731
    modes, splits, weights = array("nodes_modes"), array("nodes_splits"), array("leaf_weights")
    sets, current = [], []
    for value in array("membership_values"):
        if np.isnan(value):
            sets.append(current)
            current = []
        else:
            current.append(value)
    members = {i: sets.pop(0) for i, mode in enumerate(modes) if mode == 6}

    def walk(i, row):
        while True:
            x, mode, t = row[ints("nodes_featureids")[i]], modes[i], splits[i]
            if np.isnan(x):
                go = ints("nodes_missing_value_tracks_true")[i] == 1 or mode == 5
            else:
                go = [x <= t, x < t, x >= t, x > t, x == t, x != t, x in members.get(i, [])][mode]
            side = "true" if go else "false"
            i, leaf = ints(f"nodes_{side}nodeids")[i], ints(f"nodes_{side}leafs")[i]
            if leaf:
                return weights[i]

    x = RNG.choice(np.concatenate([GRID, GRID + 0.25, [np.nan]]), size=(200, FEATURES)).astype(np.float32)
    want = np.array([[np.float32(sum(np.float32(walk(r, row)) for r in ints("tree_roots")))] for row in x.tolist()])
    local = RunningServer(tmp_path)
    try:
        got = ask(local, httpclient, "members", x)["Y"]
    finally:
        local.stop()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["forest", "forest3", "xgboost"])
def test_large_batches_split_over_the_pool_answer_the_same(ml_server, name):
    """300 rows through 100 trees are split over the CPU pool's threads."""
    server, root = ml_server
    x = RNG.standard_normal((300, FEATURES)).astype(np.float32)
    assert_same(ask(server, grpcclient, name, x), reference(root, name, x), name)
