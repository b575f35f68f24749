#!/usr/bin/env python3
"""An upstream that speaks the V2 gRPC API wrongly, one way per model:

  short     answers an FP32 [1] output with 3 bytes
  huge      answers a message of 2 MiB (the front accepts 1 MiB)
  garbage   answers bytes that are no protobuf message
  failing   answers INTERNAL with a message
  missing   answers NOT_FOUND

Its health and metadata calls answer correctly, so each model becomes ready.
Usage: hostile.py PORT
"""
import sys
from concurrent import futures

import grpc
from tritonclient.grpc import service_pb2 as pb

PORT = int(sys.argv[1])


def live(request, context):
    return pb.ServerLiveResponse(live=True)


def ready(request, context):
    return pb.ModelReadyResponse(ready=True)


def metadata(request, context):
    return pb.ModelMetadataResponse(
        name=request.name,
        platform="hostile",
        inputs=[pb.ModelMetadataResponse.TensorMetadata(name="x", datatype="FP32", shape=[-1])],
        outputs=[pb.ModelMetadataResponse.TensorMetadata(name="y", datatype="FP32", shape=[-1])],
    )


def infer(request, context):
    def output(shape, raw):
        return pb.ModelInferResponse(
            model_name=request.model_name,
            outputs=[pb.ModelInferResponse.InferOutputTensor(name="y", datatype="FP32", shape=shape)],
            raw_output_contents=[raw],
        ).SerializeToString()

    if request.model_name == "short":
        return output([1], b"abc")
    if request.model_name == "huge":
        return output([2 << 18], bytes(2 << 20))
    if request.model_name == "garbage":
        return b"\xff\xff\xff\xff\xff"
    if request.model_name == "failing":
        context.abort(grpc.StatusCode.INTERNAL, "the model raised ValueError: boom")
    context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_name}")


def unary(function, request_type, raw_answer=False):
    return grpc.unary_unary_rpc_method_handler(
        function,
        request_deserializer=request_type.FromString,
        response_serializer=(lambda b: b) if raw_answer else (lambda m: m.SerializeToString()),
    )


handlers = grpc.method_handlers_generic_handler(
    "inference.GRPCInferenceService",
    {
        "ServerLive": unary(live, pb.ServerLiveRequest),
        "ModelReady": unary(ready, pb.ModelReadyRequest),
        "ModelMetadata": unary(metadata, pb.ModelMetadataRequest),
        "ModelInfer": unary(infer, pb.ModelInferRequest, raw_answer=True),
    },
)
server = grpc.server(
    futures.ThreadPoolExecutor(max_workers=4),
    options=[("grpc.max_send_message_length", 64 << 20)],
)
server.add_generic_rpc_handlers((handlers,))
server.add_insecure_port(f"127.0.0.1:{PORT}")
server.start()
print("serving", flush=True)
server.wait_for_termination()
