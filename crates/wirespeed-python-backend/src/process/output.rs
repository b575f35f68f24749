//! A worker's stdout and stderr, as the server's log: each line with the
//! model and instance, at the level `pb_utils.Logger` gave it (Triton
//! logs a model's lines at theirs), the model's own prints at info.

use std::io;

/// Logs each line the worker writes to its stdout or stderr, until it
/// exits: `model.py`'s prints, its tracebacks, `pb_utils.Logger`.
pub(super) fn relay(output: io::PipeReader, model: &str, instance: usize) {
    use std::io::BufRead;
    let mut lines = io::BufReader::new(output);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let (level, text) = logged_level(text.trim_end());
                // The target is the one the backend had inside
                // wirespeed-models: log filters written for it still work.
                macro_rules! relay_at {
                    ($level:ident) => {
                        tracing::$level!(
                            target: "wirespeed_models::python::output",
                            model = %model,
                            instance,
                            "{}",
                            text
                        )
                    };
                }
                match level {
                    tracing::Level::ERROR => relay_at!(error),
                    tracing::Level::WARN => relay_at!(warn),
                    tracing::Level::DEBUG => relay_at!(debug),
                    _ => relay_at!(info),
                }
            }
        }
    }
}

/// The level of a line a worker wrote: `pb_utils.Logger`'s lines begin
/// with a record separator and the level's letter (`I`, `W`, `E`, `V` for
/// Triton's VERBOSE, the server's debug), the rest is the model's own
/// output, logged at info.
fn logged_level(line: &str) -> (tracing::Level, &str) {
    let Some(rest) = line.strip_prefix('\u{1e}') else {
        return (tracing::Level::INFO, line);
    };
    let level = match rest.as_bytes().first() {
        Some(b'W') => tracing::Level::WARN,
        Some(b'E') => tracing::Level::ERROR,
        Some(b'V') => tracing::Level::DEBUG,
        Some(b'I') => tracing::Level::INFO,
        _ => return (tracing::Level::INFO, line),
    };
    (level, rest[1..].trim_start())
}
