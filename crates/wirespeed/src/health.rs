//! `wirespeed health`: asks a running server whether it is ready (or live),
//! and exits 0 if it is, 1 if not. It is the container's `HEALTHCHECK`: the
//! image has no shell and no curl, only this binary. One plain HTTP/1.1
//! GET over `std::net`, because a probe must not need a runtime or TLS;
//! a server with `--tls-cert` is probed over gRPC health by the platform
//! instead (docs/deploy.md).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub(crate) struct HealthArgs {
    /// The server's REST address.
    #[arg(long, env = "WIRESPEED_HEALTH_ADDR", default_value = "127.0.0.1:8000")]
    addr: String,

    /// Ask whether the server is live rather than ready.
    #[arg(long)]
    live: bool,

    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3.0)]
    timeout: f64,
}

/// Runs the probe: 0 when the server answers 200, 1 otherwise, with the
/// reason on stderr.
pub(crate) fn run(args: &HealthArgs) -> ExitCode {
    let path = if args.live {
        "/v2/health/live"
    } else {
        "/v2/health/ready"
    };
    let Some(timeout) = Duration::try_from_secs_f64(args.timeout)
        .ok()
        .filter(|t| !t.is_zero())
    else {
        eprintln!("error: --timeout must be a positive number of seconds");
        return ExitCode::FAILURE;
    };
    match status(&args.addr, path, timeout) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(code) => {
            eprintln!("{} answered {code} to GET {path}", args.addr);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cannot ask {} (GET {path}): {e:#}", args.addr);
            ExitCode::FAILURE
        }
    }
}

/// The status code of `GET path` on `addr`.
fn status(addr: &str, path: &str, timeout: Duration) -> anyhow::Result<u16> {
    let target: SocketAddr = addr
        .to_socket_addrs()
        .context("not an address")?
        .next()
        .context("the address resolves to nothing")?;
    let mut stream = TcpStream::connect_timeout(&target, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        let n = stream.read(&mut head[read..])?;
        anyhow::ensure!(n > 0, "the connection closed before an answer");
        read += n;
    }
    let line = std::str::from_utf8(&head[..read]).unwrap_or_default();
    line.strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .context("the answer is not HTTP")
}
