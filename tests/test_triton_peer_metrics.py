"""Custom metrics (`pb_utils.MetricFamily`) against the real Triton: the
same model served by Triton 2.51 (tests/triton_peer.py, metrics on) and by
wirespeed, asked the same through tritonclient, what the model saw inside
`execute` compared field by field.

A module of its own: no other Triton runs meanwhile. (Triton 2.51's
Python backend aborts now and then, `boost::interprocess::lock_exception`
in `TRITONBACKEND_ModelInstanceExecute`, when a model makes and drops
metric families inside `execute`, or while another Triton serves Python
models beside it; the model keeps its families, as Triton's example does.)
"""

import json
import os
import sys

import numpy as np

from test_triton_peer_python_api import infer

# wirespeed's workers run the models on the tests' Python (numpy's).
os.environ.setdefault("WIRESPEED_PYTHON", sys.executable)


METRICS = '''
import json
import urllib.request

import numpy as np
import triton_python_backend_utils as pb_utils


def scrape(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.family = pb_utils.MetricFamily(
            name="peer_requests", description="requests seen", kind=pb_utils.MetricFamily.COUNTER)
        self.seen = self.family.Metric(labels={"model": "metrics"})
        # Another Metric of the label set is the same series.
        self.twin = self.family.Metric(labels={"model": "metrics"})
        self.sizes = pb_utils.MetricFamily(
            name="peer_sizes", description="sizes", kind=pb_utils.MetricFamily.HISTOGRAM)
        self.size = self.sizes.Metric(labels={"k": "v"}, buckets=[1.0, 10.0])
        self.level = pb_utils.MetricFamily(
            name="peer_level", description="level", kind=pb_utils.MetricFamily.GAUGE)
        self.gauge = self.level.Metric()

    def execute(self, requests):
        responses = []
        for request in requests:
            url = pb_utils.get_input_tensor_by_name(request, "URL").as_numpy()[0].decode()
            found = {"instance": self.instance}
            self.seen.increment(1)
            found["twin value"] = self.twin.value()
            found["seen on /metrics"] = [line for line in scrape(url).splitlines()
                                         if line.startswith("peer_requests")]
            self.size.observe(5.0)
            found["histogram on /metrics"] = sorted(line for line in scrape(url).splitlines()
                                                    if line.startswith("peer_sizes"))
            self.gauge.set(4.0)
            self.gauge.increment(-1.5)
            found["gauge value"] = self.gauge.value()
            out = np.array([json.dumps(found).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
'''


# Operations Triton's server refuses, and what Triton 2.51 answered them
# (asked of it once; asking it again aborts it now and then, above), for
# a model whose instance is `refused_0`.
REFUSED = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.counters = pb_utils.MetricFamily(name="refused_c", description="c", kind=pb_utils.MetricFamily.COUNTER)
        self.counter = self.counters.Metric()
        self.histograms = pb_utils.MetricFamily(
            name="refused_h", description="h", kind=pb_utils.MetricFamily.HISTOGRAM)
        self.histogram = self.histograms.Metric(buckets=[1.0])
        self.gauges = pb_utils.MetricFamily(name="refused_g", description="g", kind=pb_utils.MetricFamily.GAUGE)

    def execute(self, requests):
        found = {}
        for name, call in [("counter set", lambda: self.counter.set(1.0)),
                           ("counter decrement", lambda: self.counter.increment(-1.0)),
                           ("counter observe", lambda: self.counter.observe(1.0)),
                           ("histogram value", lambda: self.histogram.value())]:
            try:
                call()
                found[name] = "no error"
            except pb_utils.TritonModelException as e:
                found[name] = str(e)
        gauge = self.gauges.Metric()
        del self.gauges
        try:
            gauge.set(1.0)
            found["after its family is gone"] = "no error"
        except pb_utils.TritonModelException as e:
            found["after its family is gone"] = str(e)
        out = np.array([json.dumps(found).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
'''

TRITON_REFUSED = {
    "counter set": "Failed to set metric value: Failed to process the request for model 'refused_0', "
                   "message: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
    "counter observe": "Failed to observe metric value: Failed to process the request for model 'refused_0', "
                       "message: TRITONSERVER_METRIC_KIND_COUNTER does not support Observe",
    "histogram value": "Failed to get metric value: Failed to process the request for model 'refused_0', "
                       "message: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
    "after its family is gone": "Failed to set metric value: Invalid metric operation as the corresponding "
                                "'MetricFamily' has been deleted. The 'MetricFamily' object should be deleted "
                                "AFTER its corresponding 'Metric' objects have been deleted.",
}


def test_custom_metrics_are_the_servers_at_once_as_in_triton(tmp_path):
    """A model's metrics live in the server: a change made in `execute` is
    on /metrics before `execute` returns, two Metrics of one label set
    share a value, a histogram counts into its buckets, a gauge keeps its
    value; and what Triton refuses is refused in Triton's words, a
    Metric whose family is gone among them (its own QA's custom_metrics
    test asks these)."""
    from conftest import RunningServer, free_port
    from triton_peer import TritonServer

    # Two models of one contract: a URL in, a JSON string out.
    for name, code in (("metrics", METRICS), ("refused", REFUSED)):
        model = tmp_path / "repo" / name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(
            'backend: "python"\n'
            'input [ { name: "URL" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n')
        (model / "1" / "model.py").write_text(code)
    metrics_port = free_port()
    triton = TritonServer(tmp_path / "repo", tmp_path / "triton.log",
                          ["--allow-metrics=true", "--metrics-address=127.0.0.1", f"--metrics-port={metrics_port}"])
    try:
        ours = RunningServer(tmp_path / "repo")
        try:
            urls = {"triton": f"http://127.0.0.1:{metrics_port}/metrics",
                    "wirespeed": f"http://127.0.0.1:{ours.metrics_port}/metrics"}
            servers = {"triton": triton, "wirespeed": ours}
            answers = {}
            for name, server in servers.items():
                answers[name] = []
                for _ in range(2):
                    status, out = infer(server, "metrics", {"URL": np.array([urls[name].encode()], dtype=np.object_)},
                                        "OUT")
                    assert status == "ok", (name, status, out)
                    answers[name].append(json.loads(out[0]))
            status, out = infer(ours, "refused", {"URL": np.array([b""], dtype=np.object_)}, "OUT")
            assert status == "ok", (status, out)
            refusals = json.loads(out[0])
        finally:
            ours.stop()
    finally:
        triton.stop()
    triton_first = answers["triton"][0]
    assert triton_first["twin value"] == 1.0, answers["triton"]
    assert triton_first["seen on /metrics"] == ['peer_requests{model="metrics"} 1'], answers["triton"]
    assert 'peer_sizes_bucket{k="v",le="10"} 1' in triton_first["histogram on /metrics"], answers["triton"]
    assert 'peer_sizes_bucket{k="v",le="10"} 2' in answers["triton"][1]["histogram on /metrics"], answers["triton"]
    for triton_answer, ours in zip(answers["triton"], answers["wirespeed"]):
        for key in triton_answer:
            assert ours[key] == triton_answer[key], (key, triton_answer)
    # Refused as Triton refuses (a negative increment of a counter too,
    # whose words Triton's tests do not pin).
    for key, message in TRITON_REFUSED.items():
        assert refusals[key] == message, key
    assert refusals["counter decrement"].startswith("Failed to increment metric value: Failed to process the request"
                                                    " for model 'refused_0', message: ")
