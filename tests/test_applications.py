"""Applications (`backend = "application"`): Clipper's model selection
layer. Several models behind one name, chosen per query by a policy that
learns from Clipper's feedback (`POST /{app}/update`): Exp3 routes to the
better model, Exp4 blends and cuts stragglers at the latency objective,
weighted splits stick by key, each user's state is its own, and what was
learned survives a candidate's reload and a restart.

The candidates are ONNX graphs built here with onnx.helper; every answer
is checked against onnxruntime's for the same file and input, and the
feedback comes from a simulated labeller whose rule the test knows.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import requests
from onnx import TensorProto, helper

from conftest import RunningServer, run_wirespeed

# The labeller: a query x in [0, 1) is labelled 1 when x < 0.5. A
# threshold model y = (x < t) is then right with probability 1 - |t - 0.5|:
# "good" (t = 0.4) 90% of the time, "poor" (t = 0.1) 60%.
THRESHOLDS = {"good": 0.4, "poor": 0.1}


def threshold_model(t):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])
    limit = helper.make_tensor("t", TensorProto.FLOAT, [], [t])
    graph = helper.make_graph(
        [helper.make_node("Less", ["x", "t"], ["below"]),
         helper.make_node("Cast", ["below"], ["y"], to=TensorProto.FLOAT)],
        "threshold", [x], [y], initializer=[limit])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def offset_model(c):
    """y = x + c: which candidate answered is read off the answer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])
    offset = helper.make_tensor("c", TensorProto.FLOAT, [], [c])
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "offset", [x], [y],
                              initializer=[offset])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


TENSORS = """
[[inputs]]
name = "x"
datatype = "FP32"
shape = [-1, 1]
[[outputs]]
name = "y"
datatype = "FP32"
shape = [-1, 1]
"""


def application(root, name, keys, tables=""):
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "config.toml").write_text(f'backend = "application"\n{keys}\n{TENSORS}\n{tables}')


def onnx_models(root, models):
    sessions = {}
    for name, model in models.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        onnx.save(model, root / name / "model.onnx")
        (root / name / "config.toml").write_text('backend = "onnx"\n')
        sessions[name] = ort.InferenceSession(str(root / name / "model.onnx"))
    return sessions


def reference(session, x):
    return float(session.run(None, {"x": np.array([[x]], dtype=np.float32)})[0][0][0])


def predict(server, app, x, uid=None):
    body = {"input": [x]}
    if uid is not None:
        body["uid"] = uid
    r = requests.post(f"http://{server.address}/{app}/predict", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def infer(server, app, x, **parameters):
    body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [x]}]}
    if parameters:
        body["parameters"] = parameters
    r = requests.post(f"http://{server.address}/v2/models/{app}/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def update(session, server, app, x, label, uid=None):
    body = {"input": [x], "label": label}
    if uid is not None:
        body["uid"] = uid
    r = session.post(f"http://{server.address}/{app}/update", json=body, timeout=30)
    assert r.status_code == 200 and r.text == "Feedback received? 1", r.text


def scrape(server):
    return requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text


def metric(text, name, **labels):
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in the scrape")


def label(x):
    return 1.0 if x < 0.5 else 0.0


@pytest.fixture(scope="module")
def threshold_repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("apps")
    sessions = onnx_models(root, {name: threshold_model(t) for name, t in THRESHOLDS.items()})
    return root, sessions


def test_exp3_learns_from_clipper_feedback_to_route_to_the_better_model(threshold_repository, tmp_path):
    """Exp3 over "good" (right 90% of the time) and "poor" (60%): after
    N = 1,000 feedback calls, at least 80% of queries go to "good" (the
    regret bound of Exp3 itself is checked, with its γ, in the policy's
    unit test). Every answer is one of the two models' onnxruntime
    answers."""
    root, sessions = threshold_repository
    application(root, "router", 'policy = "exp3"\ncandidates = ["good", "poor"]\nexploration = 0.1\nseed = 5')
    server = RunningServer(root, ["--metrics", "127.0.0.1:0"])
    try:
        rng = np.random.default_rng(3)
        with requests.Session() as session:
            for x in rng.random(1000):
                update(session, server, "router", float(x), label(float(x)))
        text = scrape(server)
        assert metric(text, "wirespeed_selection_feedback_total", application="router") == 1000
        assert metric(text, "wirespeed_selection_weight", application="router", model="good") > 0.9
        before = metric(text, "wirespeed_selection_total", application="router", model="good")
        for x in rng.random(200):
            answer = predict(server, "router", float(x))
            assert answer["default"] is False
            assert answer["output"][0] in {reference(s, float(x)) for s in sessions.values()}
        after = metric(scrape(server), "wirespeed_selection_total", application="router", model="good")
        assert after - before >= 160, f"{after - before} of 200 queries went to the better model"
        # V2 infer on the application's name is answered by it as well.
        answer = infer(server, "router", 0.3)
        assert answer["model_name"] == "router" and answer["outputs"][0]["data"][0] in (0.0, 1.0)
        metadata = requests.get(f"http://{server.address}/v2/models/router", timeout=10).json()
        assert metadata["platform"] == "application"
    finally:
        server.stop()


def test_each_users_state_is_its_own(threshold_repository, tmp_path):
    """Exp4, per `uid`: user "a" labels by "good"'s rule and user "b" by
    "poor"'s, so each one's blend moves to its own model; a query without
    a uid keeps the even blend, which no feedback trained."""
    root, sessions = threshold_repository
    application(root, "blend", 'policy = "exp4"\ncandidates = ["good", "poor"]\nlearning_rate = 0.5')
    server = RunningServer(root, ["--metrics", "127.0.0.1:0"])
    try:
        rng = np.random.default_rng(4)
        with requests.Session() as session:
            for x in rng.random(60):
                x = float(x)
                update(session, server, "blend", x, reference(sessions["good"], x), uid="a")
                update(session, server, "blend", x, reference(sessions["poor"], x), uid=7)
        # x = 0.2: "good" says 1, "poor" says 0.
        assert predict(server, "blend", 0.2, uid="a")["output"][0] > 0.95
        assert predict(server, "blend", 0.2, uid=7)["output"][0] < 0.05
        assert predict(server, "blend", 0.2)["output"][0] == pytest.approx(0.5)
        assert infer(server, "blend", 0.2, uid="a")["outputs"][0]["data"][0] > 0.95
        assert metric(scrape(server), "wirespeed_selection_keys", application="blend") == 2
    finally:
        server.stop()


def test_weighted_split_sticks_by_key(tmp_path):
    """80/20 between two candidates: each uid always lands on the same
    one, and the queries without a uid split near 80/20."""
    sessions = onnx_models(tmp_path, {"stable": offset_model(100.0), "canary": offset_model(200.0)})
    application(tmp_path, "split", 'policy = "weighted"\nseed = 1\ncandidates = '
                '[{ model = "stable", weight = 80 }, { model = "canary", weight = 20 }]')
    application(tmp_path, "split_by_header", 'policy = "weighted"\nkey = "header:X-User"\ncandidates = '
                '[{ model = "stable", weight = 50 }, { model = "canary", weight = 50 }]')
    server = RunningServer(tmp_path, ["--metrics", "127.0.0.1:0"])
    try:
        for uid in range(40):
            seen = {predict(server, "split", 1.0, uid=f"user-{uid}")["output"][0] for _ in range(5)}
            assert len(seen) == 1, f"user-{uid} landed on {seen}"
            assert seen <= {reference(s, 1.0) for s in sessions.values()}
        stable = sum(predict(server, "split", 1.0)["output"][0] == 101.0 for _ in range(500))
        assert 370 <= stable <= 430, f"{stable} of 500 to the 80% candidate"
        # Keyed by a header: the same user lands on the same candidate
        # through V2 REST and V2 gRPC (tritonclient's own headers).
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        http = httpclient.InferenceServerClient(server.address)
        grpc = grpcclient.InferenceServerClient(server.grpc_address)
        for uid in range(20):
            answers = set()
            for client, module in ((http, httpclient), (grpc, grpcclient)):
                x = module.InferInput("x", [1, 1], "FP32")
                x.set_data_from_numpy(np.array([[1.0]], dtype=np.float32))
                for _ in range(3):
                    result = client.infer("split_by_header", [x], headers={"x-user": f"user-{uid}"})
                    answers.add(float(result.as_numpy("y")[0][0]))
            # Clipper's and TF Serving's REST APIs read the same header.
            headers = {"X-User": f"user-{uid}"}
            clipper = requests.post(f"http://{server.address}/split_by_header/predict",
                                    json={"input": [1.0]}, headers=headers, timeout=30)
            assert clipper.status_code == 200, clipper.text
            answers.add(float(clipper.json()["output"][0]))
            tf = requests.post(f"http://{server.address}/v1/models/split_by_header:predict",
                               json={"instances": [[1.0]]}, headers=headers, timeout=30)
            assert tf.status_code == 200, tf.text
            answers.add(float(np.asarray(tf.json()["predictions"]).reshape(-1)[0]))
            assert len(answers) == 1 and answers <= {101.0, 201.0}, (uid, answers)
    finally:
        server.stop()


def test_an_ensemble_answers_at_its_objective_without_its_straggler(tmp_path):
    """Exp4 over three models, one of which takes 60 s: the answer comes
    at the 300 ms objective from the other two, marked with its
    stragglers, and counted; with every candidate slow, the answer is the
    application's default."""
    for name, delay in [("fast1", 0), ("fast2", 0), ("slow", 60000), ("slow2", 60000)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.toml").write_text(
            f'backend = "identity"\ndelay_ms = {delay}\n[[inputs]]\nname = "y"\ndatatype = "FP32"\n'
            'shape = [-1, 1]\n[[outputs]]\nname = "y"\ndatatype = "FP32"\nshape = [-1, 1]\n')
    slo = '[slo]\nlatency_ms = 300\ndefault_output = { y = [-1.0] }\n'
    for app, candidates in [("trio", '["fast1", "fast2", "slow"]'), ("stuck", '["slow", "slow2"]')]:
        (tmp_path / app).mkdir()
        (tmp_path / app / "config.toml").write_text(
            f'backend = "application"\npolicy = "exp4"\ncandidates = {candidates}\n[[inputs]]\nname = "y"\n'
            'datatype = "FP32"\nshape = [-1, 1]\n[[outputs]]\nname = "y"\ndatatype = "FP32"\nshape = [-1, 1]\n'
            + slo)
    server = RunningServer(tmp_path, ["--metrics", "127.0.0.1:0"])
    try:
        body = {"inputs": [{"name": "y", "shape": [1, 1], "datatype": "FP32", "data": [0.25]}]}
        r = requests.post(f"http://{server.address}/v2/models/trio/infer", json=body, timeout=30)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["outputs"][0]["data"] == [0.25]
        assert answer["parameters"]["stragglers"] == 1
        assert "default" not in answer["parameters"]
        text = scrape(server)
        assert metric(text, "wirespeed_selection_stragglers_total", application="trio", model="slow") == 1
        assert metric(text, "wirespeed_selection_stragglers_total", application="trio", model="fast1") == 0
        # The straggler was dropped at the objective: canceled, not awaited.
        assert metric(text, "nv_inference_request_failure", model="slow", reason="CANCELED") == 1
        r = requests.post(f"http://{server.address}/v2/models/stuck/infer", json=body, timeout=30)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["outputs"][0]["data"] == [-1.0]
        assert answer["parameters"]["default"] is True and answer["parameters"]["stragglers"] == 2
        clipper = requests.post(f"http://{server.address}/stuck/predict", json={"input": [0.5]}, timeout=30).json()
        assert clipper["default"] is True and clipper["output"] == [-1.0]
    finally:
        server.stop()


def test_what_was_learned_survives_a_candidates_reload_and_a_restart(threshold_repository, tmp_path):
    root, sessions = threshold_repository
    application(root, "remembers", 'policy = "exp4"\ncandidates = ["good", "poor"]\nlearning_rate = 0.3\n'
                f'state_file = "{tmp_path / "state.json"}"')
    args = ["--metrics", "127.0.0.1:0", "--model-control-mode", "explicit", "--load-model", "remembers"]
    server = RunningServer(root, args)
    try:
        with requests.Session() as session:
            for x in np.random.default_rng(6).random(40):
                update(session, server, "remembers", float(x), label(float(x)))
        learned = metric(scrape(server), "wirespeed_selection_weight", application="remembers", model="good")
        assert learned > 0.6
        r = requests.post(f"http://{server.address}/v2/repository/models/good/load", timeout=60)
        assert r.status_code == 200, r.text
        assert metric(scrape(server), "wirespeed_selection_weight", application="remembers",
                      model="good") == learned
        # Unloading the application writes its state; loading reads it.
        r = requests.post(f"http://{server.address}/v2/repository/models/remembers/unload", timeout=60)
        assert r.status_code == 200, r.text
    finally:
        server.stop()
    assert (tmp_path / "state.json").exists()
    server = RunningServer(root, args)
    try:
        server.wait_for_log("restored the selection state")
        text = scrape(server)
        assert metric(text, "wirespeed_selection_weight", application="remembers",
                      model="good") == pytest.approx(learned)
        assert metric(text, "wirespeed_selection_feedback_total", application="remembers") == 40
    finally:
        server.stop()


def test_mistakes_are_refused_in_clippers_words(threshold_repository, tmp_path):
    root, _ = threshold_repository
    application(root, "errs", 'policy = "exp3"\ncandidates = ["good", "poor"]')
    server = RunningServer(root)
    try:
        cases = [
            ("errs", {"input": [0.5]}, "'label' is missing"),
            ("errs", {"input": [0.5], "label": "yes"}, "'label' must be a number"),
            ("errs", {"input_batch": [[0.5]], "label": 1}, "not an 'input_batch'"),
            ("good", {"input": [0.5], "label": 1}, "a model, not an application"),
            ("nosuch", {"input": [0.5], "label": 1}, "no application 'nosuch'"),
        ]
        for app, body, words in cases:
            r = requests.post(f"http://{server.address}/{app}/update", json=body, timeout=30)
            assert 400 <= r.status_code < 500, (app, body, r.text)
            assert r.json()["error"] in ("Json error", "Query processing error") and words in r.json()["cause"], r.text
    finally:
        server.stop()
    for keys, words in [
        ('policy = "exp5"\ncandidates = ["good"]', "unknown policy 'exp5'"),
        ('policy = "weighted"\ncandidates = ["good", "poor"]', "has no weight"),
        ('policy = "exp3"\ncandidates = ["good", "nosuch"]', "candidate 'nosuch'"),
        ('policy = "exp4"\ncandidates = ["good"]\nexploration = 0.2', "'exploration' is exp3's"),
    ]:
        folder = tmp_path / "bad"
        onnx_models(folder, {name: threshold_model(t) for name, t in THRESHOLDS.items()})
        application(folder, "app", keys)
        result = run_wirespeed("serve", "--check", "--models", folder)
        assert result.returncode != 0 and words in result.stderr, result.stderr
