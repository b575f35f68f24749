//! `wirespeed.trees`: XGBoost and LightGBM models predicted by wirespeed's
//! tree runtime on numpy arrays, with the GIL released, large batches
//! split over threads, and raw columns through the model folder's
//! preprocessing.

use std::path::PathBuf;

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use wirespeed_core::{Tensor, TensorData};
use wirespeed_trees::TreeEnsemble;
use wirespeed_trees::TreeModel;

use crate::pool::pool;
use crate::tensors::{from_numpy, to_numpy};

/// Rows from which a batch is split over threads.
const PARALLEL_ROWS: usize = 4096;

enum Loaded {
    File(TreeEnsemble),
    Folder(Box<TreeModel>),
}

/// A tree ensemble loaded by `wirespeed.trees.load`.
#[pyclass(module = "wirespeed.trees", frozen, name = "Model")]
pub(crate) struct Model {
    loaded: Loaded,
    path: PathBuf,
}

impl Model {
    fn ensemble(&self) -> &TreeEnsemble {
        match &self.loaded {
            Loaded::File(e) => e,
            Loaded::Folder(m) => m.ensemble(),
        }
    }

    /// Margins and predictions of `rows`, computed with the GIL released.
    fn run(&self, py: Python<'_>, rows: &[f32], margins_only: bool) -> (Vec<f32>, Vec<f32>) {
        let e = self.ensemble();
        let n = rows.len() / e.num_features().max(1);
        py.detach(|| {
            let mut margins = vec![0.0f32; n * e.num_groups()];
            if margins_only {
                e.predict_margins(rows, &mut margins);
                return (margins, Vec::new());
            }
            let mut predictions = vec![0.0f32; n * e.prediction_width()];
            match pool() {
                Ok(pool) if n >= PARALLEL_ROWS => {
                    e.predict_parallel(rows, &mut margins, &mut predictions, pool)
                }
                _ => e.predict_margins_and_predictions(rows, &mut margins, &mut predictions),
            }
            (margins, predictions)
        })
    }

    /// Rows of `x` as f32 features, checked against the model's width.
    fn rows(&self, x: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<f32>)> {
        let nf = self.ensemble().num_features();
        let array = x.cast::<numpy::PyUntypedArray>().map_err(|_| {
            PyTypeError::new_err("X must be a numpy array of shape (rows, features)")
        })?;
        let shape = array.shape().to_vec();
        let n = match shape.as_slice() {
            [n, f] if *f == nf => *n,
            [f] if *f == nf => 1,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "X has shape {shape:?}; the model takes {nf} features per row: (rows, {nf})"
                )))
            }
        };
        // float32 C-contiguous rows are read as they are; others converted.
        if let Ok(f32s) = x.cast::<PyArrayDyn<f32>>() {
            let view = f32s.readonly();
            if let Ok(slice) = view.as_slice() {
                return Ok((n, slice.to_vec()));
            }
        }
        let converted = x.call_method1("astype", ("float32",))?;
        let (_, data) = from_numpy(&converted)?;
        let TensorData::Fp32(rows) = data else {
            return Err(PyTypeError::new_err("X must hold numbers"));
        };
        Ok((n, rows))
    }

    fn shaped<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        width: usize,
        values: Vec<f32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shape = if width == 1 { vec![n] } else { vec![n, width] };
        to_numpy(py, &shape, TensorData::Fp32(values))
    }
}

#[pymethods]
impl Model {
    /// The objective's predictions: probabilities, values or classes,
    /// `(rows,)` or `(rows, classes)`, as the model's library predicts them.
    fn predict<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (n, rows) = self.rows(x)?;
        let (_, predictions) = self.run(py, &rows, false);
        self.shaped(py, n, self.ensemble().prediction_width(), predictions)
    }

    /// The raw margins: the sums of the trees before the objective's
    /// transform (xgboost's `output_margin=True`, lightgbm's `raw_score=True`).
    fn predict_margin<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (n, rows) = self.rows(x)?;
        let (margins, _) = self.run(py, &rows, true);
        self.shaped(py, n, self.ensemble().num_groups(), margins)
    }

    /// Predictions from raw columns (a dict of name to 1-D array, one
    /// element per row), through the `[[preprocess]]` of the model
    /// folder's `config.toml`.
    fn predict_records<'py>(
        &self,
        py: Python<'py>,
        columns: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Loaded::Folder(model) = &self.loaded else {
            return Err(PyValueError::new_err(format!(
                "{} is a model file with no preprocessing; load its model folder (with \
                 config.toml's [[preprocess]]) to predict from raw columns",
                self.path.display()
            )));
        };
        let mut tensors = Vec::with_capacity(columns.len());
        for (name, values) in columns.iter() {
            let values = if values.is_instance_of::<numpy::PyUntypedArray>() {
                values
            } else {
                py.import("numpy")?.call_method1("asarray", (values,))?
            };
            let (shape, data) = from_numpy(&values)?;
            tensors.push(Tensor {
                name: name.extract()?,
                shape,
                data,
                parameters: Vec::new(),
            });
        }
        let (n, rows) = model
            .features(&tensors)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let (_, predictions) = self.run(py, &rows, false);
        self.shaped(py, n, self.ensemble().prediction_width(), predictions)
    }

    /// Features per row.
    #[getter]
    fn num_features(&self) -> usize {
        self.ensemble().num_features()
    }

    /// Trees in the ensemble.
    #[getter]
    fn num_trees(&self) -> usize {
        self.ensemble().num_trees()
    }

    /// The raw columns `predict_records` takes, in order (empty for a file).
    #[getter]
    fn columns(&self) -> Vec<String> {
        match &self.loaded {
            Loaded::File(_) => Vec::new(),
            Loaded::Folder(m) => m.columns().iter().map(|c| c.name.clone()).collect(),
        }
    }

    fn __repr__(&self) -> String {
        let e = self.ensemble();
        format!(
            "wirespeed.trees.Model({:?}, trees={}, features={}, objective={:?})",
            self.path.display().to_string(),
            e.num_trees(),
            e.num_features(),
            e.objective()
        )
    }
}

/// Loads an XGBoost (JSON, UBJSON) or LightGBM (text) model file, or a
/// wirespeed model folder (its `config.toml`, preprocessing included).
#[pyfunction]
pub(crate) fn load(py: Python<'_>, path: PathBuf) -> PyResult<Model> {
    let loaded = if path.is_dir() {
        let pool = pool()?;
        let folder = path.clone();
        let model = py
            .detach(|| TreeModel::load_folder(&folder, pool))
            .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
        Loaded::Folder(Box::new(model))
    } else {
        let file = path.clone();
        let ensemble = py
            .detach(|| wirespeed_trees::load(&file))
            .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
        Loaded::File(ensemble)
    };
    Ok(Model { loaded, path })
}
