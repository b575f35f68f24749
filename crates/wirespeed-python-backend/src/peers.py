"""MLServer's and KServe's APIs in wirespeed's worker (`worker.py`, sent
after this file as one program, whose `Worker` takes these methods): a
model written to either runs as under its own server, handed that server's
own types (MLServer's `InferenceRequest` and `TensorData`, KServe's
`InferRequest`), answering theirs, and described as they describe it.
"""

import inspect
import json
import os


class PeerApis:
    """The methods of `Worker` that speak MLServer's and KServe's APIs."""

    # -- MLServer's API ----------------------------------------------------
    def load_mlserver(self, message):
        """An `mlserver.MLModel`, loaded as MLServer loads it: its settings
        read by MLServer's own loader, its class imported from the model's
        folder, `load()` awaited."""
        from mlserver import types
        from mlserver.repository.load import load_model_settings

        settings = load_model_settings(message["file"])
        settings.name = message["config"]["name"]
        model = settings.implementation(settings)
        ready = self.call(model.load)
        if ready is False:
            raise RuntimeError("%s.load() returned False" % type(model).__name__)
        model.ready = True
        self.model = model
        self.mlserver_types = types
        # A runtime that streams (predict_stream, and no predict of its
        # own) answers each request with the responses it yields.
        from mlserver import MLModel

        cls = type(model)
        self.decoupled = (cls.predict_stream is not MLModel.predict_stream
                          and cls.predict is MLModel.predict)
        # What MLServer answers of the model: its metadata() once loaded.
        self.metadata = json.loads(self.call(model.metadata).model_dump_json(exclude_none=True))

    def infer_mlserver(self, inputs, message):
        """One request as MLServer's `predict` gets it; its answer's
        outputs."""
        response = self.call(self.model.predict, self.mlserver_request(inputs, message))
        return self.mlserver_outputs(response, "predict returned")

    def mlserver_request(self, inputs, message):
        """A request as MLServer's front hands it to a runtime: an
        InferenceRequest of the request's tensors, its parameters and the
        outputs it asks for."""
        if list(inputs) == [JSON_BODY]:
            raise InvalidRequest("an MLServer runtime answers the V2 protocol: "
                                 "POST /v2/models/<name>/infer")
        types = self.mlserver_types
        # Each input's data as MLServer's front hands it to a runtime: a
        # TensorData of the values as a list (a runtime may answer it back
        # as an output's data).
        request_inputs = [
            types.RequestInput(name=name, shape=shape, datatype=datatype,
                               data=types.TensorData(root=data),
                               parameters=types.Parameters(**own) if own else None)
            for name, datatype, shape, data, own in self.request_tensors(inputs, message)
        ]
        parameters = message.get("parameters") or {}
        return types.InferenceRequest(
            inputs=request_inputs,
            parameters=types.Parameters(**parameters) if parameters else None,
            outputs=[types.RequestOutput(name=n) for n in message["outputs"]] or None,
        )

    def mlserver_outputs(self, response, what):
        """The outputs of an InferenceResponse a runtime gave, prepared for
        the segment, each with its parameters."""
        if not isinstance(response, self.mlserver_types.InferenceResponse):
            raise TypeError("%s %s; MLServer's API answers an InferenceResponse"
                            % (what, type(response).__name__))
        prepared = []
        # The response's own parameters (its request codec's content
        # type) travel with the first output (wirespeed_core::RESPONSE_PARAMETER).
        answered = response.parameters.model_dump(exclude_none=True) if response.parameters else {}
        for output in response.outputs:
            data = getattr(output.data, "root", output.data)
            # The output's own parameters (its codec's content type), as
            # MLServer writes them: those set.
            own = output.parameters.model_dump(exclude_none=True) if output.parameters else {}
            typed = self.typed(output.name, output.datatype, output.shape, data)
            if list(typed[1].shape) != list(output.shape):
                # A BYTES shape that counts bytes (MLServer's [len(text)]
                # for one text): answered as the runtime wrote it.
                own[WRITTEN_SHAPE] = ",".join(str(d) for d in output.shape)
            for key, value in answered.items():
                own[RESPONSE_PARAMETER + key] = value
            answered = {}
            prepared.append((output.name, typed, own))
        return prepared

    def stream_mlserver(self, request_id, inputs, message):
        """An MLServer runtime's predict_stream on one request (as MLServer's
        REST front calls it: an iterator of that one request); each
        InferenceResponse it yields is a response of the stream."""
        request = self.mlserver_request(inputs, message)

        async def payloads():
            yield request

        def send(item):
            payload, layout = self.pack_prepared(self.mlserver_outputs(item, "predict_stream yielded"))
            self.channel.send(
                with_metrics({"op": "response", "id": request_id, "final": False, "outputs": layout}),
                payload,
            )

        self.each_yielded(request_id, self.model.predict_stream(payloads()), send)
        self.send_response(request_id, None, True)

    def request_tensors(self, inputs, message):
        """Each input as another server's REST front hands it over: name,
        datatype, shape, data (a flat list; strings as str) and its own
        parameters."""
        datatypes = {name: datatype for name, datatype, *_ in message["inputs"]}
        for name, array in inputs.items():
            datatype = datatypes[name]
            if datatype == "BYTES":
                data = [as_text(v) for v in array.reshape(-1)]
            else:
                data = array.reshape(-1).tolist()
            own = self.input_parameters.get(name)
            shape = list(array.shape)
            if own and WRITTEN_SHAPE in own:
                # A BYTES shape as MLServer's clients write it, its last
                # dimension the elements' length (wirespeed_core::WRITTEN_SHAPE).
                shape = [int(d) for d in own.pop(WRITTEN_SHAPE).split(",") if d]
            yield name, datatype, shape, data, own or None

    def typed(self, name, datatype, shape, data):
        """An output given as the protocol's datatype, shape and data (a
        list, nested or flat, or an array), prepared for the segment."""
        if datatype == "BYTES":
            if isinstance(data, (bytes, bytearray, str)):
                data = [data]
            flat = np.asarray(data, dtype=np.object_).reshape(-1)
            count = 1
            for d in shape:
                count *= d
            array = flat.reshape(shape) if count == flat.size else flat
            return "BYTES", array, bytes_raw(array)
        array = np.ascontiguousarray(np.asarray(data, dtype=self.dtype(datatype, name)).reshape(shape))
        return datatype, array, None

    # -- KServe's API -------------------------------------------------------
    def load_kserve(self, message):
        """The `kserve.Model` that `model.py` defines, made as its own
        `__main__` would make it (named the model's name; `model_dir`, when
        it takes one, its folder) and loaded unless it loaded itself. The
        `ModelServer().start()` of its `__main__` does not run: the server
        is wirespeed."""
        import kserve

        path = message["file"]
        folder = os.path.dirname(os.path.abspath(path))
        module = model_module(path)
        classes = [
            value for value in module.__dict__.values()
            if isinstance(value, type) and issubclass(value, kserve.Model)
            and value.__module__ == "model"
        ]
        if not classes:
            raise TypeError("%s defines no subclass of kserve.Model" % path)
        # A transformer and a predictor in one file: the predictor is the
        # one that is not subclassed further.
        leaves = [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
        cls = leaves[-1]
        name = message["config"]["name"]
        arguments = {}
        for parameter in list(inspect.signature(cls.__init__).parameters.values())[2:]:
            if parameter.name == "model_dir":
                arguments["model_dir"] = folder
            elif parameter.default is inspect.Parameter.empty and parameter.kind in (
                    parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                raise TypeError("%s.__init__ needs '%s', which wirespeed cannot give; give it a "
                                "default" % (cls.__name__, parameter.name))
        model = cls(name, **arguments)
        if not getattr(model, "ready", False):
            result = self.call(model.load)
            if result is False:
                raise RuntimeError("%s.load() returned False" % cls.__name__)
            model.ready = True
        self.model = model
        # What KServe answers of the model: its input and output types.
        types_of = [getattr(model, f, None) for f in ("get_input_types", "get_output_types")]
        inputs, outputs = [self.call(f) if f is not None else [] for f in types_of]
        self.metadata = {"name": name, "versions": None, "platform": "",
                         "inputs": list(inputs or []), "outputs": list(outputs or [])}

    def infer_kserve(self, inputs, message):
        """One request as KServe's V2 data plane gives it to the model: an
        InferRequest (its inputs' data as lists, as KServe's REST front
        gives them), through the model's preprocess, predict and
        postprocess."""
        from kserve.protocol.infer_type import InferInput, InferRequest, InferResponse

        if list(inputs) == [JSON_BODY]:
            # KServe's v1: the body as the dict it parsed, the dict
            # answered as JSON.
            try:
                payload = json.loads(inputs[JSON_BODY].reshape(-1)[0])
            except ValueError as e:  # a V2 request that named an input so
                raise InvalidRequest("input '%s' is not JSON: %s" % (JSON_BODY, e))
            result = self.call(self.model, payload, {})
            if isinstance(result, tuple):
                result = result[0]
            if isinstance(result, InferResponse):
                result = result.to_rest()[0]
                if isinstance(result, (bytes, bytearray)):
                    result = json.loads(result)
            answer = np.array([json.dumps(result, default=plain).encode()], dtype=np.object_)
            return [(JSON_BODY, ("BYTES", answer, bytes_raw(answer)))]
        infer_inputs = [
            InferInput(name, shape, datatype, data=data, parameters=own)
            for name, datatype, shape, data, own in self.request_tensors(inputs, message)
        ]
        parameters = message.get("parameters") or {}
        request = InferRequest(
            model_name=self.model.name,
            infer_inputs=infer_inputs,
            request_id=message.get("request_id") or None,
            parameters=parameters or None,
        )
        result = self.call(self.model, request, {})
        if isinstance(result, tuple):  # (response, response headers)
            result = result[0]
        if isinstance(result, InferResponse):
            prepared = []
            for output in result.outputs:
                prepared.append((output.name, self.typed(
                    output.name, output.datatype, output.shape, output.as_numpy())))
            return prepared
        if isinstance(result, dict) and "predictions" in result:
            result = result["predictions"]
        return [("output-0", self.prepare("output-0", result))]
