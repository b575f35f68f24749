"""XGBoost and LightGBM models predicted by wirespeed's tree runtime.

>>> model = wirespeed.trees.load("model.json")       # doctest: +SKIP
>>> model.predict(X)                                  # doctest: +SKIP

:func:`load` reads an XGBoost model (JSON or UBJSON) or a LightGBM text
model, or a wirespeed model folder, whose ``config.toml`` may declare
``[[preprocess]]`` columns for :meth:`Model.predict_records`. Predictions
equal xgboost's and lightgbm's own; the GIL is released while predicting and
batches of 4096 rows or more are split over one thread per core.
"""

from wirespeed._wirespeed import Model, load

__all__ = ["Model", "load"]
