//! The values of `serve`'s flags that are more than a number or a path:
//! seconds, `--metrics`, `--metrics-buckets`, a listen address or `off`,
//! and Triton's `--cache-config`.

use std::net::SocketAddr;
use std::time::Duration;

use wirespeed_server::Buckets;

/// A duration given in (possibly fractional) seconds.
pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("'{text}' is not a positive number of seconds"))
}

/// `--metrics`: an address, `rest` or `off`.
#[derive(Clone, Copy)]
pub(crate) enum MetricsFlag {
    Off,
    Rest,
    At(SocketAddr),
}

impl std::str::FromStr for MetricsFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<MetricsFlag, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(MetricsFlag::Off),
            "rest" => Ok(MetricsFlag::Rest),
            _ => s.parse().map(MetricsFlag::At).map_err(|_| {
                format!("'{s}' is not an address like 127.0.0.1:8002, nor 'rest' or 'off'")
            }),
        }
    }
}

/// `--metrics-buckets`: bounds in seconds, or `off`.
#[derive(Clone)]
pub(crate) struct BucketsFlag(pub(crate) Option<Buckets>);

impl std::str::FromStr for BucketsFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<BucketsFlag, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(BucketsFlag(None));
        }
        let bounds = s
            .split(',')
            .map(|b| {
                b.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("'{b}' is not a number of seconds"))
            })
            .collect::<Result<Vec<f64>, String>>()?;
        Buckets::new(&bounds).map(|b| BucketsFlag(Some(b)))
    }
}

/// A TCP address to listen on, or `off`.
#[derive(Clone, Copy)]
pub(crate) struct Listen(pub(crate) Option<SocketAddr>);

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen(None));
        }
        s.parse()
            .map(|addr| Listen(Some(addr)))
            .map_err(|_| format!("'{s}' is not an address like 127.0.0.1:8000, nor 'off'"))
    }
}

/// The response cache's size from Triton's `--cache-config` values
/// (`local,size=BYTES`, the keys in one value or several); none when not
/// given.
pub(crate) fn cache_size(values: &[String]) -> anyhow::Result<Option<usize>> {
    let mut size = None;
    for value in values {
        let mut parts = value.split(',');
        let cache = parts.next().unwrap_or_default();
        anyhow::ensure!(
            cache == "local",
            "--cache-config '{value}': the cache here is 'local' (Triton's in-memory one), not '{cache}'"
        );
        for setting in parts {
            match setting.split_once('=') {
                Some(("size", bytes)) => {
                    let bytes: usize = bytes.parse().map_err(|_| {
                        anyhow::anyhow!(
                            "--cache-config '{value}': size is '{bytes}', not a number of bytes"
                        )
                    })?;
                    size = Some(bytes);
                }
                _ => anyhow::bail!(
                    "--cache-config '{value}': the local cache takes size=BYTES, not '{setting}'"
                ),
            }
        }
    }
    anyhow::ensure!(
        values.is_empty() || size.is_some(),
        "--cache-config local needs size=BYTES: --cache-config local,size=1048576"
    );
    Ok(size.filter(|&bytes| bytes > 0))
}
