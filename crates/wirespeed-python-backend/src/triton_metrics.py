# triton_python_backend_utils, continued (the server sends this file after
# triton_python_backend_utils.py as one module): Triton's custom metrics,
# pb_utils.MetricFamily and pb_utils.Metric.

# -- custom metrics -----------------------------------------------------
#
# The values live in the server, as in Triton: inside `initialize` and
# `execute` each operation is a call the worker makes and waits for
# (`_metric_call`), so `/metrics` shows it at once and `value()` reads the
# value every Metric of the label set shares. Where the worker cannot wait
# (a thread of the model's own, `finalize`, a family Python collects) the
# change is kept here and travels with the worker's next message; `value()`
# there reads this process's own view.

_MAX_PENDING = 100_000
# Set by the worker: sends one operation and returns the server's answer,
# or None when it cannot wait for one now.
_metric_call = None
_pending_changes = []
# Each family's kind, as this process made it (the server keeps them too).
_family_kinds = {}
# This process's view of each series' value: (family, labels) -> value.
_local_values = {}

# The model instance's name (`args["model_instance_name"]`), which
# Triton's server names in the errors it answers.
_model_instance_name = ""
_KIND_NAMES = {0: "COUNTER", 1: "GAUGE", 2: "HISTOGRAM"}
_LIFETIME_ERROR = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been "
    "deleted. The 'MetricFamily' object should be deleted AFTER its "
    "corresponding 'Metric' objects have been deleted."
)


def _valid_metric_name(name, label=False):
    if not isinstance(name, str) or not name:
        return False
    first = name[0]
    if not (first.isascii() and (first.isalpha() or first == "_" or (first == ":" and not label))):
        return False
    return all(c.isascii() and (c.isalnum() or c == "_" or (c == ":" and not label)) for c in name)


def _metric_send(change, wait=True, keep=True):
    """Carries out `change` in the server: at once when the worker can wait
    for it (the server's answer), else (`keep`) kept for the next message
    (None)."""
    call = _metric_call if wait else None
    if call is not None:
        reply = call(change)
        if reply is not None:
            if reply.get("error"):
                raise TritonModelException(reply["error"])
            return reply
    if keep and len(_pending_changes) < _MAX_PENDING:
        _pending_changes.append(change)
    return None


class MetricFamily:
    """A family of custom metrics, exported on the server's /metrics."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KINDS = {0: "counter", 1: "gauge", 2: "histogram"}

    def __init__(self, name, description, kind):
        if kind not in self._KINDS:
            raise TritonModelException("MetricFamily kind must be COUNTER, GAUGE or HISTOGRAM, not %r" % (kind,))
        if not _valid_metric_name(name):
            raise TritonModelException("'%s' is not a valid metric family name" % name)
        if not isinstance(description, str):
            raise TritonModelException("a MetricFamily's description must be a string")
        known = _family_kinds.get(name)
        if known is not None and known != kind:
            raise TritonModelException(
                "Error when creating MetricFamily: the metric family '%s' exists as a %s, not a %s"
                % (name, self._KINDS[known], self._KINDS[kind])
            )
        self._name = name
        self._kind = kind
        self._description = description
        self._metrics = []
        _metric_send(self._change("family"))
        _family_kinds[name] = kind

    def _change(self, op, labels=None, value=0.0, buckets=()):
        return {
            "family": self._name,
            "description": self._description,
            "kind": self._KINDS[self._kind],
            "labels": labels or {},
            "op": op,
            "value": float(value),
            "buckets": list(buckets),
        }

    def Metric(self, labels=None, buckets=None):
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != self.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == self.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        metric = Metric(self, labels, buckets)
        # The family holds its metrics, as Triton's does: they are let go
        # with it.
        self._metrics.append(metric)
        return metric

    def __del__(self):
        try:
            for metric in self._metrics:
                if not metric._cleared:
                    metric._cleared = True
                    # Never waits: Python may collect the family anywhere.
                    _metric_send(metric._change("delete"), wait=False)
        except Exception:
            pass


class Metric:
    """One labelled metric of a MetricFamily. Two of one family and label
    set are one series."""

    def __init__(self, family, labels=None, buckets=None):
        labels = dict(labels or {})
        for key, value in labels.items():
            if not _valid_metric_name(key, label=True) or key.startswith("__"):
                raise TritonModelException("'%s' is not a valid metric label name" % key)
            if not isinstance(value, str):
                raise TritonModelException("metric label '%s' must be a string" % key)
        bounds = [float(b) for b in buckets] if buckets is not None else []
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise TritonModelException(
                "Error when creating Metric: histogram buckets must be strictly increasing, each once"
            )
        # Only what operations need: the family's Python object may go
        # before this one (then operations fail, as in Triton).
        self._family = family._name
        self._kind = family._kind
        self._description = family._description
        self._labels = labels
        self._buckets = bounds
        self._cleared = False
        self._key = (self._family, tuple(sorted(labels.items())))
        _metric_send(self._change("create"))
        _local_values.setdefault(self._key, 0.0)

    def _change(self, op, value=0.0):
        return {
            "family": self._family,
            "description": self._description,
            "kind": MetricFamily._KINDS[self._kind],
            "labels": self._labels,
            "op": op,
            "value": float(value),
            "buckets": self._buckets,
        }

    def _check(self, what, allowed, verb):
        if self._cleared:
            # The worker's own refusal (Triton's stub's).
            raise TritonModelException("Failed to %s: %s" % (what, _LIFETIME_ERROR))
        if self._kind not in allowed:
            self._refuse(what, "TRITONSERVER_METRIC_KIND_%s does not support %s" % (_KIND_NAMES[self._kind], verb))

    def _refuse(self, what, why):
        """Raises what Triton's server answers an operation it refuses."""
        raise TritonModelException(
            "Failed to %s: Failed to process the request for model '%s', message: %s"
            % (what, _model_instance_name, why)
        )

    def increment(self, value):
        what = "increment metric value"
        self._check(what, (MetricFamily.COUNTER, MetricFamily.GAUGE), "Increment")
        if self._kind == MetricFamily.COUNTER and value < 0:
            self._refuse(what, "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                         "monotonically by non-negative values.")
        _metric_send(self._change("increment", value))
        _local_values[self._key] = _local_values.get(self._key, 0.0) + float(value)

    def set(self, value):
        self._check("set metric value", (MetricFamily.GAUGE,), "Set")
        _metric_send(self._change("set", value))
        _local_values[self._key] = float(value)

    def observe(self, value):
        self._check("observe metric value", (MetricFamily.HISTOGRAM,), "Observe")
        _metric_send(self._change("observe", value))

    def value(self):
        """The series' value: the server's (every Metric of this label
        set, in every instance of the model), or this process's own view
        where the worker cannot ask."""
        self._check("get metric value", (MetricFamily.COUNTER, MetricFamily.GAUGE), "Value")
        reply = _metric_send(self._change("value"), keep=False)
        if reply is not None and reply.get("value") is not None:
            _local_values[self._key] = float(reply["value"])
        return _local_values.get(self._key, 0.0)


def _take_metric_changes():
    """The changes kept since the last call, for the worker's next message."""
    global _pending_changes
    changes, _pending_changes = _pending_changes, []
    return changes


for _class in (MetricFamily, Metric):
    _class.__module__ = "c_python_backend_utils"
del _class
