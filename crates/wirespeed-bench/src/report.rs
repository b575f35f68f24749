//! Showing the figures: a table on the terminal, `--json` and `--csv`
//! files, and a latency-by-percentile plot in the style of wrk2's and
//! HdrHistogram's (the x axis stretches the tail: 90 %, 99 %, 99.9 % are
//! equally spaced).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::engine::Measurement;
use crate::stats::Dist;

/// Milliseconds, with the digits that matter.
pub fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.1}")
    } else if value >= 1.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.4}")
    }
}

/// A plain text table with aligned columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as text; numbers are right-aligned, words left-aligned.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let numeric = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-')
        };
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            for (i, cell) in cells.iter().enumerate().take(columns) {
                if i > 0 {
                    out.push_str("  ");
                }
                let pad = widths[i] - cell.chars().count();
                if numeric(cell) {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                } else {
                    out.push_str(cell);
                    if i + 1 < columns {
                        out.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push('\n');
        };
        line(&self.header);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

/// The main table of a set of measurements: one row per measurement.
pub fn latency_table(measurements: &[&Measurement]) -> String {
    let mut table = Table::new([
        "target",
        "protocol",
        "load",
        "req/s",
        "errors",
        "p50 ms",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        "mean",
        "stdev",
        "uncorr p99",
        "uncorr max",
        "windows",
    ]);
    for m in measurements {
        let s = &m.summary;
        let l = &s.latency;
        table.row([
            m.target.clone(),
            m.protocol.name().to_owned(),
            m.load.describe(),
            format!("{:.0}", s.throughput),
            s.failed.to_string(),
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.p99_9),
            ms(l.p99_99),
            ms(l.max),
            ms(l.mean),
            ms(l.stdev),
            ms(s.uncorrected.p99),
            ms(s.uncorrected.max),
            settled(m),
        ]);
    }
    let mut out = table.render();
    let splits: Vec<&&Measurement> = measurements
        .iter()
        .filter(|m| m.summary.send.is_some() || !m.summary.server.is_empty())
        .collect();
    if !splits.is_empty() {
        let mut t = Table::new([
            "target",
            "client send p50",
            "wait p50",
            "receive p50",
            "server read",
            "decode",
            "queue",
            "compute",
            "encode",
            "total",
            "batch rows p50/max",
        ]);
        let p50 = |d: Option<&Dist>| d.map_or("n/a".to_owned(), |d| ms(d.p50));
        for m in splits {
            let s = &m.summary;
            t.row([
                m.target.clone(),
                p50(s.send.as_ref()),
                p50(s.wait.as_ref()),
                p50(s.receive.as_ref()),
                p50(s.server.get("read")),
                p50(s.server.get("decode")),
                p50(s.server.get("queue")),
                p50(s.server.get("compute")),
                p50(s.server.get("encode")),
                p50(s.server.get("total")),
                s.batch
                    .map_or("n/a".to_owned(), |b| format!("{}/{}", b.p50, b.max)),
            ]);
        }
        out.push_str(
            "\nwhere the time went (medians, ms; server stages and batches from its Server-Timing header):\n",
        );
        out.push_str(&t.render());
    }
    let errors: Vec<String> = measurements
        .iter()
        .flat_map(|m| {
            m.summary
                .errors
                .iter()
                .map(move |(k, n)| format!("  {}: {n} x {k}", m.target))
        })
        .collect();
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors.join("\n"));
        out.push('\n');
    }
    if measurements.len() > 1 {
        let base = &measurements[0].summary;
        out.push_str(&format!(
            "\nratios to {} (same run, interleaved windows):\n",
            measurements[0].target
        ));
        for m in &measurements[1..] {
            let s = &m.summary;
            let _ = writeln!(
                out,
                "  {}: p50 {:.2}x, p99 {:.2}x, throughput {:.2}x",
                m.target,
                s.latency.p50 / base.latency.p50.max(1e-12),
                s.latency.p99 / base.latency.p99.max(1e-12),
                s.throughput / base.throughput.max(1e-12)
            );
        }
    }
    out
}

/// "settled after 3" or "not settled (spread 12 %)".
pub fn settled(m: &Measurement) -> String {
    let spread = m.p50_spread.max(m.throughput_spread) * 100.0;
    match m.settled_after {
        Some(n) => format!("{n} (spread {spread:.1}%)"),
        None => format!("{} unsettled (spread {spread:.1}%)", m.windows.len()),
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The CSV columns of [`csv_rows`].
pub const CSV_HEADER: &str = "label,target,protocol,transport,load,requests,answered,failed,seconds,throughput,\
mean_ms,stdev_ms,min_ms,p50_ms,p90_ms,p95_ms,p99_ms,p99_9_ms,p99_99_ms,max_ms,\
uncorrected_p50_ms,uncorrected_p99_ms,uncorrected_max_ms,send_p50_ms,wait_p50_ms,receive_p50_ms,\
server_decode_p50_ms,server_queue_p50_ms,server_compute_p50_ms,server_encode_p50_ms,server_total_p50_ms,batch_p50_rows,batch_max_rows,windows,settled";

/// One CSV line per measurement; `label` names the scenario cell or sweep level.
pub fn csv_rows(rows: &[(String, &Measurement)]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    let opt = |d: Option<&Dist>| d.map_or(String::new(), |d| d.p50.to_string());
    for (label, m) in rows {
        let s = &m.summary;
        let l = &s.latency;
        let fields = [
            quote(label),
            quote(&m.target),
            m.protocol.name().to_owned(),
            m.transport.to_owned(),
            quote(&m.load.describe()),
            s.requests.to_string(),
            s.answered.to_string(),
            s.failed.to_string(),
            s.seconds.to_string(),
            s.throughput.to_string(),
            l.mean.to_string(),
            l.stdev.to_string(),
            l.min.to_string(),
            l.p50.to_string(),
            l.p90.to_string(),
            l.p95.to_string(),
            l.p99.to_string(),
            l.p99_9.to_string(),
            l.p99_99.to_string(),
            l.max.to_string(),
            s.uncorrected.p50.to_string(),
            s.uncorrected.p99.to_string(),
            s.uncorrected.max.to_string(),
            opt(s.send.as_ref()),
            opt(s.wait.as_ref()),
            opt(s.receive.as_ref()),
            opt(s.server.get("decode")),
            opt(s.server.get("queue")),
            opt(s.server.get("compute")),
            opt(s.server.get("encode")),
            opt(s.server.get("total")),
            s.batch.map_or(String::new(), |b| b.p50.to_string()),
            s.batch.map_or(String::new(), |b| b.max.to_string()),
            m.windows.len().to_string(),
            m.settled_after.is_some().to_string(),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn quote(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// The tail position of quantile `q` on the plot's x axis: log10(1/(1−q)),
/// so 0 %, 90 %, 99 %, 99.9 % sit at 0, 1, 2, 3.
fn tail(q: f64) -> f64 {
    (1.0 / (1.0 - q).max(1e-7)).log10()
}

/// Draws latency by percentile, one line per `(label, measurement)`, as an
/// SVG file at `path`.
pub fn plot(path: &Path, title: &str, lines: &[(String, &Measurement)]) -> anyhow::Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = lines
        .iter()
        .filter(|(_, m)| m.recorder.answered() > 0)
        .map(|(label, m)| {
            let h = m.recorder.latency();
            // The last quantile a histogram of n values can tell apart is
            // 1 - 1/n: its max sits there, not at "100 %".
            let last = 1.0 - 1.0 / h.len().max(2) as f64;
            let mut points: Vec<(f64, f64)> = h
                .iter_quantiles(2)
                .map(|v| {
                    (
                        tail(v.quantile_iterated_to().min(last)),
                        v.value_iterated_to() as f64 / 1e6,
                    )
                })
                .collect();
            points.push((tail(last), h.max() as f64 / 1e6));
            (label.clone(), points)
        })
        .collect();
    let x_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(2.0f64, f64::max)
        .ceil()
        .min(7.0);
    // Latency on a log axis: a peer 40 times slower and wirespeed's tail
    // both stay readable.
    let values = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .filter(|v| *v > 0.0)
    };
    let y_max = values().fold(0.0f64, f64::max) * 1.5;
    let y_min = values().fold(f64::INFINITY, f64::min) / 1.5;
    let (y_min, y_max) = if y_max > 0.0 && y_min.is_finite() {
        (y_min, y_max)
    } else {
        (1e-3, 1.0)
    };
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| {
            let q = 100.0 * (1.0 - 10f64.powf(-x));
            let text = format!("{q:.5}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            format!("{text}%")
        })
        .x_desc("percentile")
        .y_desc("latency (ms, log scale)")
        .draw()
        .map_err(draw_error)?;
    for (i, (label, points)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(draw_error)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

fn draw_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_csv_quotes() {
        let mut t = Table::new(["name", "ms"]);
        t.row(["a", "1.5"]);
        t.row(["longer", "10.25"]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "name    ms");
        assert_eq!(lines[2], "a         1.5");
        assert_eq!(lines[3], "longer  10.25");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("xy"), "xy");
        assert_eq!(quote("x\"y,"), "\"x\"\"y,\"");
    }

    #[test]
    fn the_tail_axis_spaces_nines_evenly() {
        assert_eq!(tail(0.0), 0.0);
        assert!((tail(0.9) - 1.0).abs() < 1e-9);
        assert!((tail(0.999) - 3.0).abs() < 1e-9);
    }
}
