# triton_python_backend_utils, continued (the server sends this file after
# triton_python_backend_utils.py as one module): Triton's custom metrics,
# pb_utils.MetricFamily and pb_utils.Metric.

# -- custom metrics -----------------------------------------------------
#
# A model's changes to its metrics are kept here until the worker's next
# message to the server carries them; the server keeps the values that
# /metrics shows (increments coalesced, the last set kept, observations
# each sent, at most _MAX_OBSERVATIONS between two messages).

_MAX_OBSERVATIONS = 100_000
_metric_families = {}
_pending_changes = {}
_pending_observations = []


def _valid_metric_name(name, label=False):
    if not isinstance(name, str) or not name:
        return False
    first = name[0]
    if not (first.isascii() and (first.isalpha() or first == "_" or (first == ":" and not label))):
        return False
    return all(c.isascii() and (c.isalnum() or c == "_" or (c == ":" and not label)) for c in name)


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
        existing = _metric_families.get(name)
        if existing is not None and existing._kind != kind:
            raise TritonModelException(
                "metric family '%s' exists with another kind (%s)" % (name, self._KINDS[existing._kind])
            )
        self._name = name
        self._kind = kind
        # A second family of the same name keeps the first description.
        self._description = existing._description if existing is not None else description
        if existing is None:
            _metric_families[name] = self

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)


class Metric:
    """One labelled metric of a MetricFamily."""

    def __init__(self, family, labels=None, buckets=None):
        labels = dict(labels or {})
        for key, value in labels.items():
            if not _valid_metric_name(key, label=True) or key.startswith("__"):
                raise TritonModelException("'%s' is not a valid metric label name" % key)
            if not isinstance(value, str):
                raise TritonModelException("metric label '%s' must be a string" % key)
        histogram = family._kind == MetricFamily.HISTOGRAM
        if histogram and buckets is None:
            raise TritonModelException("a histogram metric needs buckets")
        if not histogram and buckets is not None:
            raise TritonModelException("buckets are for histogram metrics")
        self._family = family
        self._labels = labels
        self._buckets = [float(b) for b in buckets] if buckets is not None else []
        self._value = 0.0
        self._change("create", 0.0)

    def _key(self, op):
        return (self._family._name, tuple(sorted(self._labels.items())), op)

    def _change(self, op, value):
        change = {
            "family": self._family._name,
            "description": self._family._description,
            "kind": MetricFamily._KINDS[self._family._kind],
            "labels": self._labels,
            "op": op,
            "value": float(value),
            "buckets": self._buckets,
        }
        if op == "observe":
            if len(_pending_observations) < _MAX_OBSERVATIONS:
                _pending_observations.append(change)
            return
        key = self._key(op)
        if op == "increment" and key in _pending_changes:
            _pending_changes[key]["value"] += float(value)
        else:
            _pending_changes[key] = change

    def increment(self, value):
        kind = self._family._kind
        if kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram metric is observed, not incremented")
        if kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be incremented by a negative value")
        self._value += value
        self._change("increment", value)

    def set(self, value):
        if self._family._kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge metric can be set")
        self._value = float(value)
        # A set replaces the increments before it.
        _pending_changes.pop(self._key("increment"), None)
        self._change("set", value)

    def observe(self, value):
        if self._family._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram metric observes")
        self._change("observe", value)

    def value(self):
        """This instance's value (each instance of a model counts its own;
        /metrics shows their sum)."""
        if self._family._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram metric has no single value")
        return self._value


def _take_metric_changes():
    """The changes made since the last call, for the worker's next message."""
    global _pending_changes, _pending_observations
    changes = list(_pending_changes.values()) + _pending_observations
    _pending_changes, _pending_observations = {}, []
    return changes


for _class in (MetricFamily, Metric):
    _class.__module__ = "c_python_backend_utils"
del _class
