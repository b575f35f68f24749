from os import PathLike
from typing import Mapping, Union

import numpy as np

class Model:
    """A tree ensemble loaded by :func:`load`."""

    num_features: int
    num_trees: int
    columns: list[str]
    """The raw columns :meth:`predict_records` takes (empty for a model file)."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions for rows ``X`` of shape ``(rows, num_features)`` (NaN is
        missing): probabilities, values or class probabilities, as
        ``xgboost.Booster.inplace_predict`` and ``lightgbm.Booster.predict``.
        Shape ``(rows,)``, or ``(rows, classes)`` for a multi-class model."""
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """The sums of the trees before the objective's transform."""
    def predict_records(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predictions from raw columns, one element per row in each, through
        the model folder's ``[[preprocess]]``."""

def load(path: Union[str, PathLike[str]]) -> Model:
    """Loads a model file (XGBoost JSON or UBJSON, LightGBM text) or a
    wirespeed model folder."""
