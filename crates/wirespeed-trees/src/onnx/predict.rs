//! Walking the trees for a batch of rows, and finishing each row's scores
//! as ONNX Runtime does: aggregates, base values, the binary classifier's
//! rules and the post transforms.

use super::*;

impl OnnxTrees {
    /// Predicts `rows` (`stride` features a row, at least
    /// [`num_features`](Self::num_features); NaN is missing): `scores`
    /// gets [`width`](Self::width) values a row and, for a classifier,
    /// `labels` one label a row.
    ///
    /// A two-class classifier follows ONNX Runtime: with weights for one
    /// class only, the second score is `1 - s` (or, with negative weights,
    /// `-s` or the logistic of both signs) and the label is the second
    /// class when the score passes 0.5 (or 0); otherwise its label is the
    /// literal 1 when the second class's score is positive, else 0.
    ///
    /// # Panics
    /// If `stride` is less than `num_features` or the buffers have the wrong length.
    pub fn predict(&self, rows: &[f32], stride: usize, scores: &mut [f32], labels: &mut [i64]) {
        assert!(stride >= self.num_features() && stride > 0);
        let n_rows = rows.len() / stride;
        assert_eq!(scores.len(), n_rows * self.n_targets);
        if let Kind::Classifier { .. } = self.kind {
            assert_eq!(labels.len(), n_rows);
        }
        let t = self.n_targets;
        if let Kind::Regressor { aggregate } = self.kind {
            if t == 1 {
                return self.predict_one_target(rows, stride, aggregate, scores);
            }
        }
        let aggregate = match self.kind {
            Kind::Regressor { aggregate } => aggregate,
            Kind::Classifier { .. } => Aggregate::Sum,
        };
        let mut sums = vec![Score::default(); n_rows * t];
        if let Some(scored) = &self.scored {
            let mut margins = vec![0f32; n_rows * t];
            self.trees.sum_leaves(rows, stride, &mut margins);
            for (s, (&value, &has)) in sums
                .iter_mut()
                .zip(margins.iter().zip(scored.iter().cycle()))
            {
                *s = Score { value, has };
            }
        } else {
            self.trees.walk(rows, stride, |row, _, leaf| {
                let range = self.starts[leaf] as usize..self.starts[leaf + 1] as usize;
                let row_sums = &mut sums[row * t..(row + 1) * t];
                for &(target, w) in &self.weights[range] {
                    let s = &mut row_sums[target as usize];
                    s.value = match aggregate {
                        Aggregate::Sum | Aggregate::Average => s.value + w,
                        Aggregate::Min if s.has && s.value <= w => s.value,
                        Aggregate::Max if s.has && s.value >= w => s.value,
                        Aggregate::Min | Aggregate::Max => w,
                    };
                    s.has = true;
                }
            });
        }
        let mut row_scores = Vec::with_capacity(t);
        for (r, row) in sums.chunks_exact_mut(t).enumerate() {
            let out = &mut scores[r * t..(r + 1) * t];
            match &self.kind {
                Kind::Regressor { aggregate } => {
                    self.finish_targets(row, *aggregate, out);
                }
                Kind::Classifier {
                    labels: classes,
                    binary_case,
                    weights_all_positive,
                } => {
                    row_scores.clear();
                    row_scores.extend_from_slice(row);
                    labels[r] = self.finish_classes(
                        &mut row_scores,
                        classes,
                        *binary_case,
                        *weights_all_positive,
                        out,
                    );
                }
            }
        }
    }

    /// A regressor with one target: ONNX Runtime's single-score path, in
    /// which `PROBIT` is the only transform applied.
    fn predict_one_target(
        &self,
        rows: &[f32],
        stride: usize,
        aggregate: Aggregate,
        scores: &mut [f32],
    ) {
        let mut sums = vec![Score::default(); scores.len()];
        if self.scored.is_some() {
            let mut margins = vec![0f32; scores.len()];
            self.trees.sum_leaves(rows, stride, &mut margins);
            for (s, value) in sums.iter_mut().zip(margins) {
                *s = Score { value, has: true };
            }
        } else {
            self.trees.walk(rows, stride, |row, _, leaf| {
                let w = self.unique[leaf];
                let s = &mut sums[row];
                s.value = match aggregate {
                    Aggregate::Sum | Aggregate::Average => s.value + w,
                    Aggregate::Min if s.has && s.value <= w => s.value,
                    Aggregate::Max if s.has && s.value >= w => s.value,
                    Aggregate::Min | Aggregate::Max => w,
                };
                s.has = true;
            });
        }
        let origin = if self.base_values.len() == 1 {
            self.base_values[0]
        } else {
            0.0
        };
        let trees = self.num_trees() as f32;
        for (out, s) in scores.iter_mut().zip(&sums) {
            let value = match aggregate {
                Aggregate::Sum => s.value + origin,
                Aggregate::Average => s.value / trees + origin,
                Aggregate::Min | Aggregate::Max if s.has => s.value + origin,
                Aggregate::Min | Aggregate::Max => origin,
            };
            *out = self.post_transform.apply_one(value);
        }
    }

    /// A regressor's row of several targets: base values, then the transform.
    fn finish_targets(&self, row: &mut [Score], aggregate: Aggregate, out: &mut [f32]) {
        let use_base = self.base_values.len() == row.len();
        let trees = self.num_trees() as f32;
        for (j, (s, o)) in row.iter().zip(out.iter_mut()).enumerate() {
            let base = if use_base { self.base_values[j] } else { 0.0 };
            let value = match aggregate {
                Aggregate::Sum if use_base => s.value + base,
                Aggregate::Sum => s.value,
                Aggregate::Average if use_base => s.value / trees + base,
                Aggregate::Average => s.value / trees,
                Aggregate::Min | Aggregate::Max => base + if s.has { s.value } else { 0.0 },
            };
            *o = Score { value, has: s.has }.written();
        }
        self.post_transform.apply(out);
    }

    /// A classifier's row: its scores into `out` and its label.
    fn finish_classes(
        &self,
        row: &mut Vec<Score>,
        labels: &[i64],
        binary_case: bool,
        weights_all_positive: bool,
        out: &mut [f32],
    ) -> i64 {
        let base = &self.base_values;
        if row.len() > 2 {
            for (s, &b) in row.iter_mut().zip(base) {
                s.value = if s.has { s.value + b } else { b };
                s.has = true;
            }
            // The first greatest of the scored classes.
            let mut best: Option<usize> = None;
            for (k, s) in row.iter().enumerate() {
                if s.has && best.is_none_or(|b| s.value > row[b].value) {
                    best = Some(k);
                }
            }
            for (o, s) in out.iter_mut().zip(row.iter()) {
                *o = s.written();
            }
            self.post_transform.apply(out);
            return labels[best.unwrap_or(0)];
        }
        // Two classes: ONNX Runtime's binary rules.
        let mut second = -1;
        match base.len() {
            2 if row[1].has => {
                row[1].value = base[1] + row[0].value;
                row[0].value = -row[1].value;
            }
            2 => {
                row[1].value += base[1];
                row[0].value += base[0];
            }
            1 => {
                row[0].value += base[0];
                if !row[1].has {
                    row.pop();
                }
            }
            0 => {
                second = 3;
                if !row[1].has {
                    row.pop();
                }
            }
            _ => {}
        }
        let positive = if row.len() == 2 && row[1].has {
            row[1].value
        } else if row[0].has {
            row[0].value
        } else {
            0.0
        };
        let label = if binary_case {
            let (passes, pass, fail) = if weights_all_positive {
                (positive > 0.5, 0, 1)
            } else {
                (positive > 0.0, 2, 3)
            };
            second = if passes { pass } else { fail };
            if passes {
                labels[1]
            } else {
                labels[0]
            }
        } else if positive > 0.0 {
            1
        } else {
            0
        };
        out.fill(0.0);
        if row.len() == 2 {
            out[0] = row[0].written();
            out[1] = row[1].written();
            self.post_transform.apply(out);
            return label;
        }
        let s = row[0].written();
        match (self.post_transform, second) {
            (PostTransform::Probit, _) => out[0] = probit(s),
            (_, 0 | 1) => {
                out[0] = 1.0 - s;
                out[1] = s;
            }
            (PostTransform::Logistic, 2 | 3) => {
                out[0] = logistic(-s);
                out[1] = logistic(s);
            }
            (_, 2 | 3) => {
                out[0] = -s;
                out[1] = s;
            }
            _ => out[0] = s,
        }
        label
    }
}

impl PostTransform {
    /// The transform of a row of two or more scores, as ONNX Runtime's
    /// `write_scores` computes it (the linear models' too).
    pub fn apply(self, scores: &mut [f32]) {
        transform(self, scores);
    }

    /// The transform of one score alone: ONNX Runtime applies only
    /// `PROBIT` to a single score.
    pub fn apply_one(self, score: f32) -> f32 {
        if self == PostTransform::Probit {
            probit(score)
        } else {
            score
        }
    }
}

/// ONNX Runtime's `write_scores` for a row of two or more scores.
fn transform(post: PostTransform, scores: &mut [f32]) {
    match post {
        PostTransform::None => {}
        PostTransform::Probit => scores.iter_mut().for_each(|s| *s = probit(*s)),
        PostTransform::Logistic => scores.iter_mut().for_each(|s| *s = logistic(*s)),
        PostTransform::Softmax => {
            let max = scores
                .iter()
                .fold(-f32::MAX, |m, &s| if s > m { s } else { m });
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
        PostTransform::SoftmaxZero => {
            let max = scores
                .iter()
                .fold(-f32::MAX, |m, &s| if s > m { s } else { m });
            let exp_neg_max = (-max).exp();
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                if *s > 0.000_000_1 || *s < -0.000_000_1 {
                    *s = (*s - max).exp();
                    sum += *s;
                } else {
                    *s *= exp_neg_max;
                }
            }
            scores.iter_mut().for_each(|s| *s /= sum);
        }
    }
}

/// ONNX Runtime's logistic function, exact on both sides of zero.
fn logistic(x: f32) -> f32 {
    let v = 1.0 / (1.0 + (-x.abs()).exp());
    if x < 0.0 {
        1.0 - v
    } else {
        v
    }
}

/// ONNX Runtime's probit: `sqrt(2) * erfinv(2x - 1)` with its
/// approximation of `erfinv`.
fn probit(x: f32) -> f32 {
    std::f32::consts::SQRT_2 * erf_inv(2.0 * x - 1.0)
}

fn erf_inv(x: f32) -> f32 {
    let sign = if x < 0.0 { -1.0f32 } else { 1.0 };
    let x = (1.0 - x) * (1.0 + x);
    let log = x.ln();
    let v = 2.0 / (std::f32::consts::PI * 0.147) + 0.5 * log;
    let v2 = 1.0 / 0.147f32 * log;
    let v3 = -v + (v * v - v2).sqrt();
    sign * v3.sqrt()
}
