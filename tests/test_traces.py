"""OpenTelemetry traces over OTLP and the W3C trace context: an OTLP
receiver in the test (opentelemetry-proto's messages and service over
grpcio) gets wirespeed's spans, carrying the client's trace id, and an
upstream server behind wirespeed gets the trace context passed on.
"""

import os
import secrets
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from conftest import RunningServer
from test_repository import ROW, copy_models

SPAN_KIND_SERVER = trace_pb2.Span.SpanKind.SPAN_KIND_SERVER
STATUS_ERROR = trace_pb2.Status.StatusCode.STATUS_CODE_ERROR


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace collector that keeps every span it is sent, with
    its resource's attributes."""

    def __init__(self):
        self.spans = []
        self.arrived = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request, context):
        with self.arrived:
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append((resource, span))
            self.arrived.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def trace(self, trace_id):
        with self.arrived:
            return [(r, s) for r, s in self.spans if s.trace_id == trace_id]

    def wait_for(self, trace_id, count, timeout=30):
        """Waits until `count` spans of the trace have arrived; the timeout
        only guards against a server that never sends them."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while len([s for _, s in self.spans if s.trace_id == trace_id]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{count} spans of trace {trace_id.hex()} did not arrive: {self.spans}")
                self.arrived.wait(left)
        return self.trace(trace_id)


def attributes(kvs):
    def value(v):
        kind = v.WhichOneof("value")
        return getattr(v, kind) if kind else None
    return {kv.key: value(kv.value) for kv in kvs}


def traceparent(sampled=True):
    trace_id, parent_id = secrets.token_bytes(16), secrets.token_bytes(8)
    header = f"00-{trace_id.hex()}-{parent_id.hex()}-{'01' if sampled else '00'}"
    return trace_id, parent_id, header


@pytest.fixture(scope="module")
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.server.stop(None)


def traced_server(root, receiver, extra=()):
    # OTEL_BSP_SCHEDULE_DELAY, OpenTelemetry's own setting, sends spans
    # every 100 ms rather than every 5 s.
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    try:
        return RunningServer(root, extra_args=["--otlp-endpoint", receiver.endpoint,
                                               "--trace-sample-ratio", "0", *extra])
    finally:
        del os.environ["OTEL_BSP_SCHEDULE_DELAY"]


def titanic_body():
    return {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 12], "data": ROW}]}


STAGES = {"read", "decode", "compute", "encode"}


def by_name(spans):
    return {s.name: s for _, s in spans}


def test_a_request_that_runs_no_inference_exports_no_span(tmp_path, receiver):
    """Only inferences are traced: a repository or shared-memory call that
    comes with a sampled client trace exports no span, not even a bare
    `infer` one."""
    server = traced_server(copy_models(tmp_path / "repo", "titanic"), receiver)
    try:
        quiet = []
        for path in ["/v2/repository/index", "/v2/systemsharedmemory/unregister"]:
            trace_id, _, header = traceparent()
            answer = requests.post(f"http://{server.address}{path}", headers={"traceparent": header})
            assert answer.status_code == 200, answer.text
            quiet.append(trace_id)
        # An inference after them: the exporter sends spans in the order
        # they end, so once its spans have come, any of the calls' would
        # have come before them.
        trace_id, _, header = traceparent()
        answer = requests.post(f"http://{server.address}/v2/models/titanic/infer", json=titanic_body(),
                               headers={"traceparent": header})
        assert answer.status_code == 200, answer.text
        assert "infer" in by_name(receiver.wait_for(trace_id, 1 + len(STAGES)))
        for quiet_id in quiet:
            assert receiver.trace(quiet_id) == [], quiet_id.hex()
    finally:
        server.stop()


def test_a_sampled_client_trace_gets_an_infer_span_and_its_stages(tmp_path, receiver):
    server = traced_server(copy_models(tmp_path / "repo", "titanic"), receiver)
    try:
        trace_id, parent_id, header = traceparent()
        answer = requests.post(f"http://{server.address}/v2/models/titanic/infer", json=titanic_body(),
                               headers={"traceparent": header, "tracestate": "vendor=abc"})
        assert answer.status_code == 200, answer.text
        spans = receiver.wait_for(trace_id, 1 + len(STAGES))
        named = by_name(spans)
        infer = named["infer"]
        assert infer.parent_span_id == parent_id and infer.kind == SPAN_KIND_SERVER
        assert infer.trace_state == "vendor=abc"
        attrs = attributes(infer.attributes)
        assert attrs["model.name"] == "titanic" and attrs["wirespeed.protocol"] == "v2_rest", attrs
        assert spans[0][0]["service.name"] == "wirespeed"
        assert STAGES <= set(named), named.keys()
        for name in set(named) - {"infer"}:
            stage = named[name]
            assert stage.parent_span_id == infer.span_id, name
            assert infer.start_time_unix_nano <= stage.start_time_unix_nano <= stage.end_time_unix_nano \
                <= infer.end_time_unix_nano, name

        # Over gRPC, from tritonclient, the trace context rides in metadata.
        trace_id, parent_id, header = traceparent()
        client = grpcclient.InferenceServerClient(server.grpc_address)
        inp = grpcclient.InferInput("features", [1, 12], "FP32")
        inp.set_data_from_numpy(np.array([ROW], dtype=np.float32))
        client.infer("titanic", [inp], headers={"traceparent": header})
        named = by_name(receiver.wait_for(trace_id, 1 + len(STAGES)))
        assert named["infer"].parent_span_id == parent_id
        assert attributes(named["infer"].attributes)["wirespeed.protocol"] == "v2_grpc"

        # A failed request's span says why.
        trace_id, _, header = traceparent()
        bad = requests.post(f"http://{server.address}/v2/models/titanic/infer",
                            json={"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 3],
                                              "data": [1, 2, 3]}]},
                            headers={"traceparent": header})
        assert bad.status_code == 400
        infer = by_name(receiver.wait_for(trace_id, 1))["infer"]
        assert infer.status.code == STATUS_ERROR and "features" in infer.status.message, infer.status

        # Unsampled and absent contexts are not recorded at ratio 0, and a
        # malformed traceparent is ignored, not an error.
        quiet = []
        for sampled_header in [traceparent(sampled=False), None, (None, None, "00-zz-11-01")]:
            headers = {"traceparent": sampled_header[2]} if sampled_header else {}
            answer = requests.post(f"http://{server.address}/v2/models/titanic/infer", json=titanic_body(),
                                   headers=headers)
            assert answer.status_code == 200, answer.text
            if sampled_header and sampled_header[0]:
                quiet.append(sampled_header[0])
        # A last sampled request: once its spans are in, so would be any
        # of the earlier ones (spans are sent in order).
        last, _, header = traceparent()
        requests.post(f"http://{server.address}/v2/models/titanic/infer", json=titanic_body(),
                      headers={"traceparent": header})
        receiver.wait_for(last, 1 + len(STAGES))
        for trace_id in quiet:
            assert receiver.trace(trace_id) == []
    finally:
        server.stop()


def test_the_trace_context_is_passed_on_to_an_upstream_server(tmp_path, receiver):
    """wirespeed in front of a second wirespeed, both exporting: the back
    server's infer span is a child of the front one's, in the client's
    trace. With tracing off, the front passes the client's context on as it
    came."""
    back = traced_server(copy_models(tmp_path / "back", "titanic"), receiver)
    front_models = tmp_path / "front"
    (front_models / "remote").mkdir(parents=True)
    # The inputs and outputs come from the back server's metadata.
    (front_models / "remote" / "config.toml").write_text(
        f'backend = "upstream"\nurl = "grpc://{back.grpc_address}"\nmodel = "titanic"\n')
    front = traced_server(front_models, receiver)
    plain = RunningServer(front_models)
    try:
        trace_id, parent_id, header = traceparent()
        answer = requests.post(f"http://{front.address}/v2/models/remote/infer", json=titanic_body(),
                               headers={"traceparent": header})
        assert answer.status_code == 200, answer.text
        spans = receiver.wait_for(trace_id, 2 * (1 + len(STAGES)))
        infers = [s for _, s in spans if s.name == "infer"]
        front_span = next(s for s in infers if s.parent_span_id == parent_id)
        back_span = next(s for s in infers if s.parent_span_id != parent_id)
        assert back_span.parent_span_id == front_span.span_id
        assert attributes(back_span.attributes)["model.name"] == "titanic"
        assert attributes(front_span.attributes)["model.name"] == "remote"

        trace_id, parent_id, header = traceparent()
        answer = requests.post(f"http://{plain.address}/v2/models/remote/infer", json=titanic_body(),
                               headers={"traceparent": header})
        assert answer.status_code == 200, answer.text
        spans = receiver.wait_for(trace_id, 1 + len(STAGES))
        assert by_name(spans)["infer"].parent_span_id == parent_id
    finally:
        for server in (plain, front, back):
            server.stop()


def test_the_last_spans_are_sent_at_shutdown(tmp_path, receiver):
    """With the SDK's default 5 s between exports, a request's spans are
    still queued when the server stops: they are sent before it exits."""
    server = RunningServer(copy_models(tmp_path / "repo", "titanic"),
                           extra_args=["--otlp-endpoint", receiver.endpoint, "--trace-sample-ratio", "0"])
    trace_id, _, header = traceparent()
    try:
        answer = requests.post(f"http://{server.address}/v2/models/titanic/infer", json=titanic_body(),
                               headers={"traceparent": header})
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert {s.name for _, s in receiver.wait_for(trace_id, 1 + len(STAGES), timeout=5)} >= STAGES | {"infer"}


@pytest.mark.parametrize("args, says", [
    (["--otlp-endpoint", "http://127.0.0.1:4317", "--trace-sample-ratio", "1.5"], "from 0 to 1"),
    (["--otlp-endpoint", "not a url"], "--otlp-endpoint not a url"),
])
def test_bad_trace_flags_stop_the_server_with_a_reason(args, says):
    from conftest import MODELS, run_wirespeed
    out = run_wirespeed("serve", "--models", MODELS, "--http", "127.0.0.1:0", "--grpc", "off", *args)
    assert out.returncode != 0 and says in out.stderr, out.stderr
