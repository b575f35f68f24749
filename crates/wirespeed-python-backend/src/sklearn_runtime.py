"""wirespeed's scikit-learn runtime, run by the Python worker.

A model saved with joblib or pickle (`model.joblib`, `model.pkl`,
`model.pickle`) is loaded once per worker and called once per batch: each
output the request asks for is one of the model's functions (`predict`,
`predict_proba`, `transform`) on the batch's one input, a 2-D array of
numbers (or a 1-D array of strings, for a text pipeline).

Run as a program (`python -c <this> probe FILE`) it loads the model and
prints what the server needs to serve it: the input it takes, and the
datatype and width of each function's answer, found by calling the
function on one row of zeros (or one empty string).
"""

import json
import sys

import numpy as np


def load(path):
    # joblib reads both joblib's files and plain pickles; it ships with
    # scikit-learn.
    import joblib

    return joblib.load(path)


def datatype(dtype):
    """The protocol's name of a numpy dtype."""
    kind, size = dtype.kind, dtype.itemsize * 8
    if kind == "b":
        return "BOOL"
    if kind == "i":
        return "INT%d" % size
    if kind == "u":
        return "UINT%d" % size
    if kind == "f":
        return "FP%d" % size
    return "BYTES"


def probe(path):
    model = load(path)
    features = getattr(model, "n_features_in_", None)
    rows = []
    if features is not None:
        rows.append(("FP64", np.zeros((1, int(features)))))
    rows.append(("BYTES", np.array([""], dtype=object)))
    if features is None:
        rows.append(("FP64", np.zeros((1, 1))))
    found = {"features": None if features is None else int(features), "functions": {}}
    for name in ("predict", "predict_proba", "transform"):
        function = getattr(model, name, None)
        if function is None:
            continue
        errors = []
        for input_type, row in rows:
            try:
                answer = np.asarray(function(row))
            except Exception as e:  # the next kind of row, or none fits
                errors.append("%s: %s" % (type(e).__name__, e))
                continue
            found.setdefault("input", input_type)
            found["functions"][name] = {
                "datatype": datatype(answer.dtype),
                "dims": [int(d) for d in answer.shape[1:]],
            }
            break
        else:
            found.setdefault("errors", {})[name] = errors
    return found


class Runtime:
    """The model, and which function answers each output."""

    def __init__(self, path, functions, column):
        self.model = load(path)
        # output name -> function name
        self.functions = functions
        # MLServer's numpy codec answers [n] as [n, 1].
        self.column = column

    def predict(self, inputs, wanted):
        if len(inputs) != 1:
            raise ValueError("a scikit-learn model takes one input, the request gives %d" % len(inputs))
        (x,) = inputs.values()
        if x.dtype == object:
            # Text: strings, as scikit-learn's vectorizers take them.
            x = np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in x.reshape(-1)],
                         dtype=object)
        produced = {}
        for output in wanted or list(self.functions)[:1]:
            function = self.functions.get(output)
            if function is None:
                raise KeyError("the model has no output '%s'" % output)
            answer = np.asarray(getattr(self.model, function)(x))
            if self.column and answer.ndim == 1:
                answer = answer.reshape(-1, 1)
            if answer.dtype.kind in "US":
                answer = answer.astype(object)
            produced[output] = answer
        return produced


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "probe":
    print(json.dumps(probe(sys.argv[2])))
