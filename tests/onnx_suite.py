"""The ONNX project's backend test suite, run against wirespeed and against
onnxruntime under the same rules: shared by `test_onnx_suite.py` (a
CI-sized sample) and `benchmarks/scripts/onnx_suite.py` (the whole suite,
its counts in docs/onnx.md).

The cases are those the installed `onnx` package generates (its node tests,
`onnx.backend.test.case.node`, pinned by tests/requirements.txt) and the
model tests its wheel ships (simple, pytorch-converted, pytorch-operator),
each a model and its inputs and expected outputs. A case whose tensors a
V2 request cannot carry (sequences, maps, optionals, complex numbers,
float8 and 4-bit types) is left out. Each model goes in a folder of its
own with only `model.onnx`, is loaded through the repository API
(`--model-control-mode explicit`), and asked over HTTP with binary tensors
(tritonclient); its outputs are compared with the expected ones: rtol 1e-4
and atol 1e-5 for floats (NaN equal to NaN), exact for integers, booleans
and strings. onnxruntime runs the same cases, compared the same way.

Outcomes: `correct`; `refused` (the load failed, with its message);
`error` (the request failed); `wrong` (an answer that differs)."""

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

RTOL, ATOL = 1e-4, 1e-5

CARRIED = {
    np.dtype(t)
    for t in [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
              np.int64, np.float16, np.float32, np.float64]
}
V2 = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}


@dataclass
class Case:
    name: str
    model: bytes
    inputs: list  # (name, array)
    outputs: list  # (name, array)
    rtol: float = RTOL
    atol: float = ATOL


def _carried(array):
    if not isinstance(array, np.ndarray):
        return False
    if array.dtype == np.object_:
        return all(isinstance(x, (str, bytes)) for x in array.reshape(-1))
    return array.dtype in CARRIED


def _case(name, model, inputs, outputs, rtol=RTOL, atol=ATOL):
    """A Case, or None when a V2 request cannot carry its tensors."""
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    feeds = [i for i in graph.input if i.name not in initializers]
    if len(feeds) != len(inputs) or len(graph.output) != len(outputs):
        return None
    for value in list(feeds) + list(graph.output):
        if not value.type.HasField("tensor_type"):
            return None
    if not all(_carried(a) for a in list(inputs) + list(outputs)):
        return None
    return Case(
        name=name,
        model=model.SerializeToString(),
        inputs=[(v.name, a) for v, a in zip(feeds, inputs)],
        outputs=[(v.name, a) for v, a in zip(graph.output, outputs)],
        rtol=max(rtol, RTOL),
        atol=max(atol, ATOL),
    )


def node_cases():
    import warnings

    from onnx.backend.test.case import node

    out = []
    with warnings.catch_warnings():
        # The generators divide by zero and overflow casts on purpose.
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    for case in collected:
        if not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        made = _case(case.name, case.model, list(inputs), list(outputs), case.rtol, case.atol)
        if made:
            out.append(made)
    return out


def shipped_cases(kinds=("simple", "pytorch-converted", "pytorch-operator")):
    """The model tests the onnx wheel ships as files."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    out = []
    for kind in kinds:
        for folder in sorted((root / kind).glob("test_*")):
            model_file = folder / "model.onnx"
            sets = sorted(folder.glob("test_data_set_*"))
            if not model_file.is_file() or not sets:
                continue
            model = onnx.load(model_file)

            def read(pattern):
                arrays = []
                for f in sorted(glob.glob(str(sets[0] / pattern)), key=lambda p: int(p.rsplit("_", 1)[1][:-3])):
                    tensor = onnx.TensorProto()
                    tensor.ParseFromString(Path(f).read_bytes())
                    arrays.append(numpy_helper.to_array(tensor))
                return arrays

            try:
                made = _case(f"{kind.replace('-', '_')}_{folder.name}", model, read("input_*.pb"), read("output_*.pb"))
            except Exception:  # a tensor the helper cannot read
                made = None
            if made:
                out.append(made)
    return out


def agrees(got, want, rtol, atol):
    """Whether `got` is `want` under the suite's rules."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype == np.object_ or got.dtype == np.object_:
        norm = lambda a: [x.decode() if isinstance(x, bytes) else str(x) for x in a.reshape(-1)]  # noqa: E731
        return norm(got) == norm(want)
    if want.dtype.kind == "f":
        if got.dtype.kind != "f":
            return False
        return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True))
    return got.dtype == want.dtype and np.array_equal(got, want)


@dataclass
class Tally:
    outcomes: dict = field(default_factory=dict)  # name -> (outcome, detail)

    def count(self, outcome):
        return sum(1 for o, _ in self.outcomes.values() if o == outcome)

    def line(self):
        return " ".join(f"{o} {self.count(o)}" for o in ("correct", "refused", "error", "wrong"))


def run_onnxruntime(cases):
    import onnxruntime

    tally = Tally()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    for case in cases:
        try:
            session = onnxruntime.InferenceSession(case.model, options, providers=["CPUExecutionProvider"])
        except Exception as e:
            tally.outcomes[case.name] = ("refused", str(e)[:300])
            continue
        try:
            got = session.run([n for n, _ in case.outputs], dict(case.inputs))
        except Exception as e:
            tally.outcomes[case.name] = ("error", str(e)[:300])
            continue
        ok = all(agrees(g, w, case.rtol, case.atol) for g, (_, w) in zip(got, case.outputs))
        tally.outcomes[case.name] = ("correct", "") if ok else ("wrong", "")
    return tally


def write_repository(cases, root):
    for case in cases:
        folder = Path(root) / case.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(case.model)


def run_wirespeed(cases, address):
    """Each case loaded through the repository API of the server at
    `address` (explicit mode, its repository written by
    `write_repository`), asked once, then unloaded."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(address)
    tally = Tally()
    for case in cases:
        try:
            client.load_model(case.name)
        except InferenceServerException as e:
            tally.outcomes[case.name] = ("refused", str(e)[:300])
            continue
        inputs = []
        for name, array in case.inputs:
            datatype = "BYTES" if array.dtype == np.object_ else V2[array.dtype]
            tensor = httpclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n, _ in case.outputs]
        try:
            answer = client.infer(case.name, inputs, outputs=outputs)
            got = [answer.as_numpy(n) for n, _ in case.outputs]
            ok = all(g is not None and agrees(g, w, case.rtol, case.atol) for g, (_, w) in zip(got, case.outputs))
            tally.outcomes[case.name] = ("correct", "") if ok else ("wrong", "")
        except InferenceServerException as e:
            tally.outcomes[case.name] = ("error", str(e)[:300])
        try:
            client.unload_model(case.name)
        except InferenceServerException:
            pass
    return tally


def onnxruntime_library():
    import onnxruntime

    return str(next((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so*")))


def environment():
    """The server's environment: ONNX Runtime's library from the wheel."""
    return dict(os.environ, ORT_DYLIB_PATH=onnxruntime_library())
