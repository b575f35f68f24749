"""What Triton's Python backend stub does around a Triton model's code, for
wirespeed's worker (`worker.py`, sent after this file as one program):
`execute` called and what it returns checked as the stub checks it, a
decoupled model's coroutine `execute` run in the background, a request
made for the model, and its errors worded and given the statuses the real
Triton gives them.
"""

import inspect
import sys
import traceback


class StubError(Exception):
    """A Triton model's mistake that Triton's stub finds outside the model's
    code (what `execute` returned): its message alone, with no type."""


# TritonError's codes by number, as the server names the statuses.
TRITON_CODES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE",
                "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED")


def triton_failure(pb_utils, e, instance):
    """A Triton model's error as Triton answers it: a `TritonError` (one
    the model returned in a response, or raised) is its message alone,
    with its code's status; any other exception `execute` raised is
    INTERNAL, "Failed to process the request(s) for model '<instance>',
    message: <type>: <text>", then the model's own frames, innermost first,
    as Triton's stub writes a Python exception."""
    if isinstance(e, pb_utils.TritonError):
        code = e.code()
        name = TRITON_CODES[code] if 0 <= code < len(TRITON_CODES) else "INTERNAL"
        return "triton:" + name, e.message()
    prefix = "Failed to process the request(s) for model '%s', message: " % instance
    if isinstance(e, StubError):
        return "triton:INTERNAL", prefix + str(e)
    frames = [
        frame for frame in traceback.extract_tb(e.__traceback__)
        # The worker's and the utilities' frames are the server's, which
        # Triton's stub (C++) has none of.
        if frame.filename != "wirespeed_worker.py" and not frame.filename.startswith("<wirespeed:")
    ]
    text = "%s: %s" % (type(e).__qualname__, e)
    if frames:
        text += "\n\nAt:\n" + "".join(
            "  %s(%d): %s\n" % (f.filename, f.lineno, f.name) for f in reversed(frames))
    return "triton:INTERNAL", prefix + text


def triton_request(pb_utils, inputs, wanted, message):
    """A request as Triton's `execute` gets it: a sequence's id and flags
    (which the server passes as parameters) as `correlation_id()` and
    `flags()`, not parameters."""
    parameters = message.get("parameters")
    correlation_id = 0
    flags = 0
    if parameters:
        parameters = dict(parameters)
        correlation_id = parameters.pop("sequence_id", 0)
        if parameters.pop("sequence_start", False):
            flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
        if parameters.pop("sequence_end", False):
            flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    else:
        parameters = {}
    arrived = pb_utils.Tensor._arrived
    return pb_utils.InferenceRequest._arrived(
        [arrived(name, array) for name, array in inputs.items()],
        list(wanted),
        message.get("request_id") or "",
        correlation_id,
        flags,
        parameters,
    )


def execute_triton(worker, batch):
    """Requests to a Triton model that is not decoupled, given to one call
    of `execute` as Triton's dynamic batcher gives them (or one alone):
    `batch` holds each one's inputs and message. What `execute` returned
    (or sent) is checked as Triton's stub checks it. Gives, per request,
    its outputs by name or the exception that fails it. A request's first
    response is its answer, as Triton's front ends keep it: an error after
    it (a second response, a response returned as well, an exception) is
    dropped."""
    import triton_python_backend_utils as pb_utils

    requests = [triton_request(pb_utils, inputs, message["outputs"], message) for inputs, message in batch]
    try:
        returned = run_triton(worker, pb_utils, requests)
    except Exception as e:
        # The call failed: every request not answered yet, with its error.
        returned = [e] * len(requests)
    return [outcome(worker, pb_utils, request, one) for request, one in zip(requests, returned)]


def outcome(worker, pb_utils, request, returned):
    """One request's answer: what `execute` returned for it (a response,
    None, or the exception it raised), or what it sent."""
    if isinstance(returned, Exception):
        if answered(request) is None:
            return returned
        returned = None
    if returned is not None and request._sender is None:
        # The usual case: `execute` returned the response and never took
        # the sender, so sending it through a new one could not fail.
        request._sender = pb_utils._OneResponseSender._answered(returned)
        return answer_of(returned)
    if returned is not None:
        # Sent as Triton sends it: through the request's sender, which
        # refuses a second response.
        try:
            request.get_response_sender().send(returned, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except pb_utils.TritonModelException as e:
            if answered(request) is None:
                return StubError(str(e))
    sender = request._sender
    if sender is not None and sender.response is None and not sender._closed:
        # Its response comes after `execute` returned: from a thread, or
        # a task on the model's event loop, which runs meanwhile.
        while not sender._closed:
            if worker.loop is not None:
                import asyncio

                worker.loop.run_until_complete(asyncio.sleep(0.001))
            else:
                sender._wait(0.05)
    response = answered(request)
    if response is None:
        return StubError(
            "execute sent no response for the request: return [InferenceResponse(...)], "
            "or send one through request.get_response_sender()"
        )
    return answer_of(response)


def answer_of(response):
    """A request's answer from its response: the response's error, or its
    outputs by name."""
    if response.has_error():
        return response.error()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def run_triton(worker, pb_utils, requests):
    """`execute` on the requests, and again on those the model reschedules
    until none is; the response returned for each, checked as Triton
    checks it (None where a request is answered through its sender)."""
    # `async def execute` (Triton's coroutine models) is awaited.
    returned = checked(pb_utils, requests, worker.call(worker.model.execute, requests))
    again = [i for i, request in enumerate(requests) if request._rescheduled()]
    while again:
        for i in again:
            if returned[i] is not None:
                # Triton's words, its spelling too.
                raise StubError(
                    "Expected a None object in the execute function return list for "
                    "reschduled request, found type '%s'." % type(returned[i])
                )
        batch = [requests[i] for i in again]
        for i, one in zip(again, checked(pb_utils, batch, worker.call(worker.model.execute, batch))):
            returned[i] = one
        again = [i for i in again if requests[i]._rescheduled()]
    return returned


def checked(pb_utils, requests, returned):
    """What one call of `execute` returned, as a response (or None) per
    request, or Triton's error for what it should not have returned."""
    if returned is None:
        return [None] * len(requests)
    if not isinstance(returned, list):
        raise StubError("Expected a list in the execute return, found type '%s'." % type(returned))
    if len(returned) != len(requests):
        raise StubError(
            "Number of InferenceResponse objects do not match the number of "
            "InferenceRequest objects. InferenceRequest(s) size is:%d, and "
            "InferenceResponse(s) size is:%d\n" % (len(requests), len(returned))
        )
    for one in returned:
        if one is not None and not isinstance(one, pb_utils.InferenceResponse):
            raise StubError(
                "Expected an 'InferenceResponse' object in the execute function "
                "return list, found type '%s'." % type(one)
            )
    return list(returned)


def answered(request):
    """The response a request was sent already, if any."""
    return request._sender.response if request._sender is not None else None


def must_return_none(instance):
    return ("Python model '%s' is using the decoupled mode and the execute "
            "function must return None." % instance)


def in_background(worker, coroutine, requests):
    """A decoupled model's coroutine `execute`, run as Triton runs it:
    on an event loop of its own thread, while the worker goes on to the
    next request. Triton only logs its exception, and the requests'
    clients would wait for ever: their streams end with the error
    instead, unless the model had ended them."""
    import asyncio
    import threading

    if worker.background is None:
        worker.background = asyncio.new_event_loop()
        threading.Thread(target=worker.background.run_forever, name="execute-loop",
                         daemon=True).start()
    future = asyncio.run_coroutine_threadsafe(coroutine, worker.background)

    def done(future):
        error = future.exception()
        if error is None and future.result() is not None:
            error = StubError(must_return_none(worker.instance_name))
        if error is None:
            return
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        failure = worker.failure(error, log=False)
        for request in requests:
            sender = request.get_response_sender()
            if sender._closed:
                continue
            sender._closed = True
            worker.channel.send(with_metrics({
                "op": "response", "id": request._stream, "final": True,
                "error": failure["error"], "kind": failure["kind"],
            }))

    future.add_done_callback(done)
