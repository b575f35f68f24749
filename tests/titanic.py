"""The Titanic feature transform of the Go ML latency benchmark, in Python.

go-featureprocessor.json names one transformer per column; their semantics
are go-featureprocessing's: identity, one-hot (unknown -> all zeros),
min-max clamped to [0, 1], quantile = (left insertion index + 1) / count
capped at 1, standard = (x - mean) / std, ordinal (unknown -> 0). Missing
numbers take Go's zero value, as the benchmark's struct decoding does.
"""

import bisect
import csv
import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "titanic"


def load_params():
    return json.loads((DATA / "go-featureprocessor.json").read_text())


def _number(text):
    return float(text) if text.strip() else 0.0


def _onehot(mapping, value):
    out = [0.0] * len(mapping)
    if value in mapping:
        out[mapping[value]] = 1.0
    return out


def features(row, params):
    """The 12-float feature vector for one CSV row (a dict)."""
    lo, hi = params["Age_minmax"]["Min"], params["Age_minmax"]["Max"]
    age = _number(row["Age"])
    age = 0.0 if age < lo else 1.0 if age > hi else (age - lo) / (hi - lo)
    quantiles = params["SibSp_quantile"]["Quantiles"]
    i = bisect.bisect_left(quantiles, _number(row["SibSp"]))
    sibsp = 1.0 if i >= len(quantiles) else (i + 1) / len(quantiles)
    fare = (_number(row["Fare"]) - params["Fare_standard"]["Mean"]) / params["Fare_standard"]["STD"]
    cabin = float(params["Cabin_ordinal"]["Mapping"].get(row["Cabin"], 0))
    return [
        _number(row["Pclass"]),
        *_onehot(params["Sex_onehot"]["Mapping"], row["Sex"]),
        age,
        sibsp,
        _number(row["Parch"]),
        fare,
        cabin,
        *_onehot(params["Embarked_onehot"]["Mapping"], row["Embarked"]),
    ]


def passenger_rows():
    """All 418 rows of test.csv as dicts, with PassengerId."""
    with open(DATA / "test.csv", newline="") as f:
        return list(csv.DictReader(f))
