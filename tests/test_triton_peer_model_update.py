"""Model updates in place, against the real Triton: a Python model loaded
again with only its instance count changed (1 -> 3 -> 1 -> 3 through
tritonclient's `load_model(..., config=...)`) adds or removes the
difference, as Triton does, so `initialize` and `finalize` run as often on
both servers; the configuration read back has the count loaded; and an
update under load (1 -> 4 -> 1 while 16 clients send requests) fails no
request on either. Each server serves its own copy of one folder, whose
model writes each `initialize` and `finalize` to a file beside it."""

import json
import os
import shutil
import sys
import textwrap
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import RunningServer, wait_until
from triton_peer import TritonServer, side_by_side

# Triton's flags, which `wirespeed serve` takes as they are.
EXPLICIT = ["--model-control-mode=explicit"]

os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)

COUNTED = '''
import os
import triton_python_backend_utils as pb_utils

EVENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "events.log")


def note(what):
    with open(EVENTS, "a") as out:
        out.write(what + "\\n")


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        note("initialize")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)]) for r in requests]

    def finalize(self):
        note("finalize")
'''


def config(count):
    return json.dumps({
        "name": "counted",
        "backend": "python",
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
        "instance_group": [{"kind": "KIND_CPU", "count": count}],
    })


@pytest.fixture
def servers(tmp_path):
    made = {}
    for name in ("triton", "wirespeed"):
        repo = tmp_path / name / "models"
        (repo / "counted" / "1").mkdir(parents=True)
        (repo / "counted" / "config.pbtxt").write_text(textwrap.dedent("""\
            name: "counted"
            backend: "python"
            input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
            output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
            instance_group [ { kind: KIND_CPU count: 1 } ]
            """))
        (repo / "counted" / "1" / "model.py").write_text(COUNTED)
        made[name] = repo
    triton = TritonServer(made["triton"], tmp_path / "triton.log", args=EXPLICIT + ["--load-model=counted"])
    try:
        ours = RunningServer(made["wirespeed"], extra_args=EXPLICIT + ["--load-model=counted"])
    except BaseException:
        triton.stop()
        raise
    yield {"triton": (triton, made["triton"].parent / "events.log"),
           "wirespeed": (ours, made["wirespeed"].parent / "events.log")}
    ours.stop()
    triton.stop()


def counts(events):
    lines = events.read_text().split() if events.exists() else []
    return lines.count("initialize"), lines.count("finalize")


def group(server):
    client = httpclient.InferenceServerClient(server.address)
    try:
        groups = client.get_model_config("counted")["instance_group"]
        return [(g["kind"], g["count"]) for g in groups]
    finally:
        client.close()


def load(server, count):
    client = httpclient.InferenceServerClient(server.address)
    try:
        client.load_model("counted", config=config(count))
    finally:
        client.close()


def test_an_instance_count_change_adds_or_removes_the_difference_as_in_triton(servers):
    # The first load with a configuration of a model loaded from its
    # folder's starts it afresh on Triton (1 -> 3: three initialized, one
    # finalized); then -2, +2 and -1 in place. Each server's removed
    # instances finalize after the load returns: each is waited for.
    steps = [(3, (4, 1)), (1, (4, 3)), (3, (6, 3)), (2, (6, 4))]
    for count, want in steps:
        for name, (server, events) in servers.items():
            load(server, count)
        for name, (server, events) in servers.items():
            wait_until(f"{name}'s instances started and finalized: {want} (now {counts(events)})",
                       lambda: counts(events) == want, timeout=60)
            assert group(server) == [("KIND_CPU", count)], name


def test_an_update_under_load_fails_no_request(servers):
    stop = threading.Event()
    failures = {"triton": [], "wirespeed": []}
    answered = {"triton": 0, "wirespeed": 0}

    def client(name, server):
        http = httpclient.InferenceServerClient(server.address)
        x = httpclient.InferInput("IN", [2], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        while not stop.is_set():
            try:
                out = http.infer("counted", [x]).as_numpy("OUT").tolist()
                if out != [2.0, 3.0]:
                    failures[name].append(f"wrong answer {out}")
                answered[name] += 1
            except Exception as e:
                failures[name].append(str(e))
        http.close()

    threads = [threading.Thread(target=client, args=(name, server))
               for name, (server, _) in servers.items() for _ in range(16)]
    for t in threads:
        t.start()
    try:
        for count in (4, 1):
            for name, (server, _) in servers.items():
                load(server, count)
            wait_until("requests answered after the load",
                       lambda: min(answered.values()) > 0, timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == {"triton": [], "wirespeed": []}
    assert min(answered.values()) > 0
    for name, (server, _) in servers.items():
        assert group(server) == [("KIND_CPU", 1)], name


SUMMING = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        out = []
        for r in requests:
            key = r.correlation_id()
            x = float(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().sum())
            if r.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.totals[key] = 0.0
            if key not in self.totals:
                raise pb_utils.TritonModelException("sequence %s was not started here" % key)
            self.totals[key] += x
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "TOTAL", np.array([self.totals[key]], np.float32))]))
        return out
'''


def summing_config(count):
    return json.dumps({
        "name": "summing",
        "backend": "python",
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "TOTAL", "data_type": "TYPE_FP32", "dims": [1]}],
        "sequence_batching": {"max_sequence_idle_microseconds": 60000000},
        "instance_group": [{"kind": "KIND_CPU", "count": count}],
    })


def test_a_running_sequence_keeps_its_instance_through_an_instance_count_change(tmp_path):
    repo = tmp_path / "models"
    (repo / "summing" / "1").mkdir(parents=True)
    (repo / "summing" / "1" / "model.py").write_text(SUMMING)
    (repo / "summing" / "config.pbtxt").write_text(textwrap.dedent("""\
        name: "summing"
        backend: "python"
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "TOTAL" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching { max_sequence_idle_microseconds: 60000000 }
        instance_group [ { kind: KIND_CPU count: 1 } ]
        """))
    answers = {}
    args = EXPLICIT + ["--load-model=summing"]
    with side_by_side(repo, tmp_path / "triton.log", args, args) as servers:
        for name, server in servers.items():
            client = httpclient.InferenceServerClient(server.address)

            def step(value, start=False, end=False):
                x = httpclient.InferInput("IN", [1], "FP32")
                x.set_data_from_numpy(np.array([value], np.float32))
                try:
                    return client.infer("summing", [x], sequence_id=42, sequence_start=start,
                                        sequence_end=end).as_numpy("TOTAL").tolist()
                except Exception as e:
                    return str(e)

            # Loaded with a configuration (a fresh start on both), then a
            # sequence runs across an update that only adds an instance.
            client.load_model("summing", config=summing_config(1))
            seen = [step(1.0, start=True), step(2.0)]
            client.load_model("summing", config=summing_config(2))
            seen += [step(3.0), step(4.0, end=True)]
            answers[name] = seen
            client.close()
    assert answers["triton"] == [[1.0], [3.0], [6.0], [10.0]], answers
    assert answers["wirespeed"] == answers["triton"]


SIMPLE = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        names = [i["name"] for i in auto_complete_model_config.as_dict()["input"]]
        if "INPUT0" not in names:
            auto_complete_model_config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        outputs = [o["name"] for o in auto_complete_model_config.as_dict()["output"]]
        if "OUTPUT0" not in outputs:
            auto_complete_model_config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 3)]) for r in requests]
'''


def test_a_load_with_a_configuration_is_completed_by_the_models_code_as_in_triton(tmp_path):
    repo = tmp_path / "models"
    (repo / "simple" / "1").mkdir(parents=True)
    (repo / "simple" / "1" / "model.py").write_text(SIMPLE)
    (repo / "simple" / "config.pbtxt").write_text('backend: "python"\n')
    seen = {}
    with side_by_side(repo, tmp_path / "triton.log", EXPLICIT, EXPLICIT) as servers:
        for name, server in servers.items():
            client = httpclient.InferenceServerClient(server.address)
            client.load_model("simple", config='{"max_batch_size": 16}')
            config = client.get_model_config("simple")
            x = httpclient.InferInput("INPUT0", [2, 4], "FP32")
            x.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4))
            out = client.infer("simple", [x]).as_numpy("OUTPUT0").tolist()
            seen[name] = (config["max_batch_size"],
                          [(i["name"], i["data_type"], i["dims"]) for i in config["input"]],
                          [(o["name"], o["data_type"], o["dims"]) for o in config["output"]], out)
            client.close()
    assert seen["triton"][0] == 16, seen
    assert seen["wirespeed"] == seen["triton"]
