"""A decoupled model's streams in wirespeed's worker (`worker.py`, sent
after this file as one program, whose `Worker` takes these methods): each
response a `response` message with its tensors' bytes after it, the
requests and cancels read by a reader thread while `execute` runs, and
the answers to its BLS calls found by their numbers.
"""

import inspect
import sys
import threading
import traceback


class DecoupledServing:
    """The methods of `Worker` that serve a decoupled model."""

    def is_cancelled(self, request_id):
        """Whether the client of decoupled request `request_id` left, or,
        with None, the client of the request being computed (the server
        sends `cancel` then, which is read here, between its messages)."""
        if request_id is not None:
            return request_id in self.cancelled
        if not self.current_cancelled and self.channel.readable():
            self.take(self.channel.recv())
        return self.current_cancelled

    def take(self, message):
        """A message that came while a request computes: a `cancel` of it
        is noted, anything else kept for the loop."""
        if message is not None and message.get("op") == "cancel":
            self.current_cancelled = True
        else:
            self.pending.append(message)

    def send_response(self, request_id, response, final):
        """One response of request `request_id` (None: the final flag
        alone), its tensors' bytes after the message."""
        message = {"op": "response", "id": request_id, "final": bool(final)}
        if final:
            # The request is done with (a cancel that comes after its final
            # response stays in the set: a number per such request).
            self.cancelled.discard(request_id)
        payload = ()
        if response is None:
            message["empty"] = True
        elif response.has_error():
            failure = self.failure(response.error(), log=False)
            message["error"] = failure["error"]
            message["kind"] = failure["kind"]
        else:
            tensors = response.output_tensors()
            produced = {t.name(): t.as_numpy() for t in tensors}
            payload, message["outputs"] = self.pack(produced)
        self.channel.send(with_metrics(message), payload)

    def pack(self, produced):
        """Tensors by name, as a frame's payload (its parts) and each
        one's place in it."""
        return self.pack_prepared([(name, self.prepare(name, value)) for name, value in produced.items()])

    def pack_prepared(self, prepared):
        """(name, (datatype, array, raw)[, parameters]) outputs as a
        frame's payload (its parts, arrays sent from where they lie) and
        each one's place (and parameters)."""
        parts = []
        layout = []
        at = 0
        for name, (datatype, array, raw), *own in prepared:
            data = buffer_view(raw if raw is not None else array)
            placed = [name, datatype, list(array.shape), at, data.nbytes]
            if own and own[0]:
                placed.append(own[0])
            layout.append(placed)
            parts.append(data)
            at += data.nbytes
        return parts, layout

    def read_loop(self, inbox):
        """Decoupled: every message from the server, as it comes."""
        while True:
            message = self.channel.recv()
            if message is None:
                inbox.put(None)
                return
            op = message.get("op")
            if op == "cancel":
                self.cancelled.add(message["id"])
            elif op in ("bls_result", "metric_result"):
                with self.bls_lock:
                    waiting = self.bls_waiting.pop(message.get("call"), None)
                if waiting is not None:
                    waiting.put(message)
            else:
                inbox.put(message)

    def serve_decoupled(self):
        import queue

        import itertools

        inbox = queue.Queue()
        self.bls_waiting = {}
        self.bls_numbers = itertools.count(1)
        threading.Thread(target=self.read_loop, args=(inbox,), daemon=True).start()
        while True:
            message = inbox.get()
            if message is None or message["op"] == "stop":
                break
            # A batch of Triton's dynamic batcher, or one request.
            batch = message["requests"] if message["op"] == "infer_batch" else [message]
            for one in batch:
                one.setdefault("size", message.get("size"))
            self.executing = []
            try:
                self.execute_decoupled(batch)
                failed = None
            except Exception as e:
                failed = e
            logged = False
            for one in batch:
                request_id = one["id"]
                reply = {"op": "executed", "id": request_id}
                if failed is not None:
                    request = next((r for r in self.executing if r._stream == request_id), None)
                    sender = getattr(request, "_sender", None)
                    if sender is not None and sender._closed:
                        # Its stream has ended: the error reaches no one,
                        # as in Triton; the log has it.
                        if not logged:
                            traceback.print_exception(type(failed), failed, failed.__traceback__,
                                                      file=sys.stderr)
                    else:
                        reply = self.failure(failed, log=not logged)
                        reply["id"] = request_id
                        # Its stream ends with the error: it is done with.
                        self.cancelled.discard(request_id)
                    logged = True
                self.channel.send(with_metrics(reply))
        self.finalize()

    def execute_decoupled(self, batch):
        if self.triton:
            import triton_python_backend_utils as pb_utils

            requests = []
            for message in batch:
                (message.get("parameters") or {}).pop(INPUT_PARAMETERS, None)
                # Copies: the input segment is the next request's once
                # `execute` returns, and the model's threads may still
                # read these.
                inputs = {name: np.array(array) for name, array in self.inputs(message).items()}
                request = triton_request(pb_utils, inputs, message["outputs"], message)
                request._stream = message["id"]
                requests.append(request)
            self.executing = requests
            result = self.model.execute(requests)
            if inspect.iscoroutine(result):
                # Triton runs a decoupled model's `async def execute` in the
                # background: the next request's starts while it awaits.
                in_background(self, result, requests)
                return
            if inspect.isawaitable(result):
                result = self.call(lambda: result)
            if result is not None:
                error = StubError(must_return_none(self.instance_name))
                if any(r._sender is None or not r._sender._closed for r in requests):
                    raise error
                # Their streams have ended: the error reaches no one, as in
                # Triton; the log has it.
                traceback.print_exception(type(error), error, None, file=sys.stderr)
                return
            # A request the model reschedules (an iterative sequence's
            # next step) comes back to execute.
            again = [r for r in requests if r._rescheduled()]
            while again:
                if self.call(self.model.execute, again) is not None:
                    raise StubError(must_return_none(self.instance_name))
                again = [r for r in again if r._rescheduled()]
            return
        (message,) = batch
        request_id = message["id"]
        self.input_parameters = (message.get("parameters") or {}).pop(INPUT_PARAMETERS, {})
        inputs = {name: np.array(array) for name, array in self.inputs(message).items()}
        wanted = message["outputs"]
        if self.api == "mlserver":
            return self.stream_mlserver(request_id, inputs, message)
        # Our API: predict yields each answer (a generator, or an async one).
        produced = self.model.predict(inputs, message.get("parameters") or {})
        if inspect.isasyncgen(produced):
            self.each_yielded(request_id, produced, lambda item: self.send_answer(request_id, item, wanted))
        else:
            if inspect.isawaitable(produced):
                produced = self.call(lambda: produced)
            if isinstance(produced, dict):
                produced = [produced]
            try:
                for item in produced:
                    if request_id in self.cancelled:
                        break
                    self.send_answer(request_id, item, wanted)
            finally:
                close = getattr(produced, "close", None)
                if close is not None:
                    close()
        self.send_response(request_id, None, True)

    def each_yielded(self, request_id, produced, send):
        """Sends each item an async generator yields, on the worker's event
        loop, until it ends or the request's client leaves."""
        import asyncio

        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        try:
            while request_id not in self.cancelled:
                try:
                    item = self.loop.run_until_complete(produced.__anext__())
                except StopAsyncIteration:
                    break
                send(item)
        finally:
            self.loop.run_until_complete(produced.aclose())

    def send_answer(self, request_id, item, wanted):
        """One answer of our API's streaming predict: a dict of outputs."""
        if not isinstance(item, dict):
            raise TypeError(
                "predict yielded %s; each answer must be a dict of output name to array"
                % type(item).__name__
            )
        missing = [name for name in wanted if name not in item]
        if missing:
            raise KeyError("the model did not return output '%s'" % missing[0])
        produced = {name: item[name] for name in wanted}
        payload, layout = self.pack(produced)
        self.channel.send(
            with_metrics({"op": "response", "id": request_id, "final": False, "outputs": layout}),
            payload,
        )

