//! `wirespeed predict`: offline batch scoring of a CSV file with a tree
//! model, the way `xgboost`'s own CLI predicts a file. Each line of the CSV
//! is one row of features; an empty field, `nan` or `NaN` is a missing value.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

/// What `predict` prints per row.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    /// The objective's prediction (probability, value or class).
    Prediction,
    /// The raw margin before the objective's transform.
    Margin,
}

#[derive(Args)]
pub(crate) struct PredictArgs {
    /// An XGBoost model saved as JSON, or a LightGBM model saved as text.
    #[arg(long, env = "WIRESPEED_PREDICT_MODEL")]
    model: PathBuf,
    /// A CSV file of feature rows, without a header.
    #[arg(long, env = "WIRESPEED_PREDICT_INPUT")]
    input: PathBuf,
    /// What to print for each row.
    #[arg(
        long,
        env = "WIRESPEED_PREDICT_OUTPUT",
        value_enum,
        default_value = "prediction"
    )]
    output: Output,
}

pub(crate) fn run(args: &PredictArgs) -> anyhow::Result<()> {
    let ensemble = wirespeed_trees::load(&args.model)
        .with_context(|| format!("cannot load {}", args.model.display()))?;
    let nf = ensemble.num_features();
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;

    let mut rows = Vec::new();
    for (line_no, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let before = rows.len();
        for field in line.split(',') {
            let field = field.trim();
            let value = if field.is_empty() {
                f32::NAN
            } else {
                field
                    .parse::<f32>()
                    .with_context(|| format!("line {}: '{field}' is not a number", line_no + 1))?
            };
            rows.push(value);
        }
        if rows.len() - before != nf {
            bail!(
                "line {} has {} fields; the model takes {nf} features",
                line_no + 1,
                rows.len() - before
            );
        }
    }

    let n_rows = rows.len() / nf;
    let mut margins = vec![0.0f32; n_rows * ensemble.num_groups()];
    let mut predictions = vec![0.0f32; n_rows * ensemble.prediction_width()];
    ensemble.predict_margins_and_predictions(&rows, &mut margins, &mut predictions);
    let (values, width) = match args.output {
        Output::Margin => (margins, ensemble.num_groups()),
        Output::Prediction => (predictions, ensemble.prediction_width()),
    };

    let mut out = BufWriter::new(std::io::stdout().lock());
    for row in values.chunks(width) {
        let fields: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        writeln!(out, "{}", fields.join(","))?;
    }
    out.flush()?;
    Ok(())
}
