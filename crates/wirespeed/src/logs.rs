//! The log: `--log-level` (with the access log's own level), text or
//! `--log-format json`, to stderr or `--log-file`.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use crate::serve::ServeArgs;

/// Sets up the process's log as `args` ask.
pub(crate) fn init(args: &ServeArgs) -> anyhow::Result<()> {
    let access = if args.access_log { "info" } else { "off" };
    let filter = EnvFilter::try_new(format!(
        "{},wirespeed_server::access={access}",
        args.log_level
    ))
    .with_context(|| format!("invalid --log-level '{}'", args.log_level))?;
    // At debug, each request's stages (read and decode, queue, compute,
    // encode) are spans, logged with their times as they close.
    let file = match &args.log_file {
        Some(path) => Some(std::sync::Arc::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open --log-file {}", path.display()))?,
        )),
        None => None,
    };
    let ansi = file.is_none() && std::io::stderr().is_terminal();
    let writer =
        tracing_subscriber::fmt::writer::BoxMakeWriter::new(move || -> Box<dyn std::io::Write> {
            match &file {
                Some(file) => Box::new(LogFile(std::sync::Arc::clone(file))),
                None => Box::new(std::io::stderr()),
            }
        });
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(writer);
    if args.log_format == "json" {
        logs.json().flatten_event(true).with_span_list(false).init();
    } else {
        logs.with_ansi(ansi).init();
    }
    Ok(())
}

/// `--log-file`, shared by the log's writers.
struct LogFile(std::sync::Arc<std::fs::File>);

impl std::io::Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}
