"""An OTLP/gRPC trace collector that takes the exports and drops them
unread: the far end of `--otlp-endpoint` in benchmarks/scripts/metrics.sh.
A real collector runs on another machine; this one shares the server's
cores, so it does as little as it can: it never decodes a message, only
counts them and their bytes. Prints the counts when stopped (SIGTERM).
Needs grpcio (tests/requirements.txt)."""

import signal
import sys
import threading
from concurrent import futures

import grpc

EXPORT = "opentelemetry.proto.collector.trace.v1.TraceService"


def main():
    counts = {"exports": 0, "bytes": 0}
    lock = threading.Lock()

    def export(request, context):
        with lock:
            counts["exports"] += 1
            counts["bytes"] += len(request)
        return b""  # an empty ExportTraceServiceResponse

    handler = grpc.method_handlers_generic_handler(EXPORT, {
        "Export": grpc.unary_unary_rpc_method_handler(export),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:4317")
    server.start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    server.stop(None)
    print(f"OTLP exports received: {counts['exports']} ({counts['bytes']} bytes)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
