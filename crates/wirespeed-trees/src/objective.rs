//! Learning objectives: how a summed margin becomes a prediction, and how the
//! model's `base_score` becomes the starting margin.

use crate::LoadError;

/// The objectives this runtime reproduces exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// Sigmoid of the margin.
    BinaryLogistic,
    /// The margin itself.
    BinaryLogitRaw,
    /// The margin itself.
    RegSquaredError,
    /// Sigmoid of the margin.
    RegLogistic,
    /// Softmax over the class margins: one probability per class.
    MultiSoftprob,
    /// The index of the largest class margin.
    MultiSoftmax,
    /// LightGBM `binary`: sigmoid of the margin times the model's `sigmoid:` scale.
    LgbBinary,
    /// LightGBM `regression` and its relatives with an identity link
    /// (`regression_l1`, `huber`, `fair`, `quantile`, `mape`): the margin.
    LgbRegression,
    /// LightGBM `multiclass`: softmax over the class margins.
    LgbMulticlass,
}

impl Objective {
    /// Parses XGBoost's objective name.
    pub fn from_xgboost_name(name: &str) -> Result<Objective, LoadError> {
        Ok(match name {
            "binary:logistic" => Objective::BinaryLogistic,
            "binary:logitraw" => Objective::BinaryLogitRaw,
            "reg:squarederror" | "reg:linear" => Objective::RegSquaredError,
            "reg:logistic" => Objective::RegLogistic,
            "multi:softprob" => Objective::MultiSoftprob,
            "multi:softmax" => Objective::MultiSoftmax,
            other => {
                return Err(LoadError::unsupported(format!(
                    "objective '{other}' is not supported; supported: binary:logistic, binary:logitraw, \
                     reg:squarederror, reg:logistic, multi:softprob, multi:softmax"
                )))
            }
        })
    }

    /// Parses the `objective=` line of a LightGBM model file.
    pub fn from_lightgbm_line(line: &str) -> Result<(Objective, f64), LoadError> {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap_or("");
        let mut scale = 1.0;
        for part in parts {
            if let Some(v) = part.strip_prefix("sigmoid:") {
                scale = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| LoadError::format(format!("invalid sigmoid parameter '{v}'")))?;
            }
        }
        let objective = match name {
            "binary" => Objective::LgbBinary,
            "regression" | "regression_l2" | "l2" | "mean_squared_error" | "mse"
            | "regression_l1" | "l1" | "huber" | "fair" | "quantile" | "mape" => {
                Objective::LgbRegression
            }
            "multiclass" | "softmax" => Objective::LgbMulticlass,
            other => {
                return Err(LoadError::unsupported(format!(
                    "LightGBM objective '{other}' is not supported; supported: binary, multiclass, \
                     and regression with an identity link (regression, regression_l1, huber, fair, \
                     quantile, mape)"
                )))
            }
        };
        Ok((objective, scale))
    }

    /// Whether this is a LightGBM objective, computed in `f64`.
    pub fn is_lightgbm(self) -> bool {
        matches!(
            self,
            Objective::LgbBinary | Objective::LgbRegression | Objective::LgbMulticlass
        )
    }

    /// LightGBM's transform in `f64`, rounded to `f32` at the end.
    pub(crate) fn transform_row64(self, margins: &[f64], scale: f64, out: &mut [f32]) {
        match self {
            Objective::LgbBinary => {
                for (o, &m) in out.iter_mut().zip(margins) {
                    *o = (1.0 / (1.0 + (-scale * m).exp())) as f32;
                }
            }
            Objective::LgbMulticlass => {
                let max = margins.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = margins.iter().map(|m| (m - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for (o, e) in out.iter_mut().zip(&exps) {
                    *o = (e / sum) as f32;
                }
            }
            _ => {
                for (o, &m) in out.iter_mut().zip(margins) {
                    *o = m as f32;
                }
            }
        }
    }

    /// XGBoost's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Objective::BinaryLogistic => "binary:logistic",
            Objective::BinaryLogitRaw => "binary:logitraw",
            Objective::RegSquaredError => "reg:squarederror",
            Objective::RegLogistic => "reg:logistic",
            Objective::MultiSoftprob => "multi:softprob",
            Objective::MultiSoftmax => "multi:softmax",
            Objective::LgbBinary => "binary",
            Objective::LgbRegression => "regression",
            Objective::LgbMulticlass => "multiclass",
        }
    }

    /// Whether the objective classifies into several classes.
    pub fn is_multiclass(self) -> bool {
        matches!(
            self,
            Objective::MultiSoftprob | Objective::MultiSoftmax | Objective::LgbMulticlass
        )
    }

    /// Whether `base_score` is a probability that [`base_margin`](Self::base_margin)
    /// turns into a logit.
    pub fn has_logistic_link(self) -> bool {
        matches!(self, Objective::BinaryLogistic | Objective::RegLogistic)
    }

    /// The starting margin for a `base_score` given in prediction space
    /// (XGBoost's `ProbToMargin`): the logit for the objectives with a
    /// sigmoid link, the score itself otherwise. `binary:logitraw` predicts
    /// margins, so its `base_score` is one already (as XGBoost, treelite and
    /// xgboost-predictor all treat it).
    pub fn base_margin(self, base_score: f32) -> f32 {
        if self.has_logistic_link() {
            -((1.0 / base_score) - 1.0).ln()
        } else {
            base_score
        }
    }

    /// How many values the prediction has per row, for `groups` margins per row.
    pub fn prediction_width(self, groups: usize) -> usize {
        match self {
            Objective::MultiSoftmax => 1,
            _ => groups,
        }
    }

    /// Turns one row's margins into its prediction, written to `out`
    /// (`prediction_width` values). Arithmetic follows XGBoost's, in `f32`.
    pub fn transform_row(self, margins: &[f32], out: &mut [f32]) {
        match self {
            Objective::BinaryLogistic | Objective::RegLogistic => {
                for (o, &m) in out.iter_mut().zip(margins) {
                    *o = sigmoid(m);
                }
            }
            Objective::BinaryLogitRaw | Objective::RegSquaredError => out.copy_from_slice(margins),
            Objective::LgbBinary | Objective::LgbRegression | Objective::LgbMulticlass => {
                let wide: Vec<f64> = margins.iter().map(|&m| f64::from(m)).collect();
                self.transform_row64(&wide, 1.0, out);
            }
            Objective::MultiSoftprob => softmax(margins, out),
            Objective::MultiSoftmax => {
                // The first maximum wins, as in XGBoost.
                let mut best = 0;
                for (k, &m) in margins.iter().enumerate() {
                    if m > margins[best] {
                        best = k;
                    }
                }
                out[0] = best as f32;
            }
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn softmax(margins: &[f32], out: &mut [f32]) {
    let max = margins.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for (o, &m) in out.iter_mut().zip(margins) {
        *o = (m - max).exp();
        sum += f64::from(*o);
    }
    let sum = sum as f32;
    for o in out.iter_mut() {
        *o /= sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logistic_base_margin_inverts_the_sigmoid() {
        let m = Objective::BinaryLogistic.base_margin(0.25);
        let mut p = [0.0];
        Objective::BinaryLogistic.transform_row(&[m], &mut p);
        assert!((p[0] - 0.25).abs() < 1e-6);
        assert_eq!(Objective::BinaryLogistic.base_margin(0.5), 0.0);
    }

    #[test]
    fn softmax_sums_to_one_and_argmax_picks_the_first_maximum() {
        let mut p = [0.0; 3];
        Objective::MultiSoftprob.transform_row(&[1.0, 2.0, 3.0], &mut p);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(p[2] > p[1] && p[1] > p[0]);
        let mut c = [0.0];
        Objective::MultiSoftmax.transform_row(&[0.5, 2.0, 2.0], &mut c);
        assert_eq!(c[0], 1.0);
    }

    #[test]
    fn unknown_objectives_are_refused_by_name() {
        let e = Objective::from_xgboost_name("rank:pairwise")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank:pairwise"), "{e}");
    }
}
