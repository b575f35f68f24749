//! Where load goes: a server address, as the user writes it.
//!
//! | written | meaning |
//! |---|---|
//! | `http://127.0.0.1:8000` | HTTP/1.1 over TCP |
//! | `unix:/run/ws.sock`, `http+unix:/run/ws.sock` | HTTP/1.1 over a Unix socket |
//! | `grpc://127.0.0.1:8001` | gRPC (HTTP/2) over TCP |
//! | `grpc+unix:/run/ws-grpc.sock` | gRPC over a Unix socket |
//!
//! A load generator pointed at someone else's server is an attack, so TCP
//! targets must resolve to loopback addresses unless the user says
//! `--allow-remote`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context};

/// How bytes reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

/// The protocol family a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// HTTP/1.1: V2 REST, TF Serving, Clipper, plain GET.
    Http,
    /// gRPC: V2 gRPC.
    Grpc,
}

/// A server to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// HTTP or gRPC.
    pub scheme: Scheme,
    /// TCP or Unix socket.
    pub transport: Transport,
    /// What the user wrote, for tables and files.
    pub label: String,
}

impl FromStr for Target {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Target> {
        let (scheme, rest) = text
            .split_once(':')
            .with_context(|| format!("'{text}' has no scheme; write http://HOST:PORT, grpc://HOST:PORT, unix:/PATH or grpc+unix:/PATH"))?;
        let (scheme, unix) = match scheme {
            "http" => (Scheme::Http, false),
            "grpc" => (Scheme::Grpc, false),
            "unix" | "http+unix" => (Scheme::Http, true),
            "grpc+unix" => (Scheme::Grpc, true),
            "https" | "grpcs" => bail!("'{text}': TLS targets are not supported by the load generator; measure over plain TCP or a Unix socket"),
            other => bail!("'{text}': unknown scheme '{other}'; use http, grpc, unix or grpc+unix"),
        };
        let transport = if unix {
            // unix:/p, unix:///p and unix://p all name the path /p or p.
            let path = rest.trim_start_matches("//");
            if path.is_empty() {
                bail!("'{text}' names no socket path");
            }
            Transport::Unix(PathBuf::from(path))
        } else {
            let authority = rest
                .strip_prefix("//")
                .with_context(|| format!("'{text}': write {}://HOST:PORT", scheme_name(scheme)))?;
            let authority = authority.split('/').next().unwrap_or_default();
            let address = authority
                .to_socket_addrs()
                .with_context(|| format!("'{text}': cannot resolve '{authority}' (HOST:PORT)"))?
                .next()
                .with_context(|| format!("'{text}': '{authority}' resolves to no address"))?;
            Transport::Tcp(address)
        };
        Ok(Target {
            scheme,
            transport,
            label: text.to_owned(),
        })
    }
}

fn scheme_name(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Http => "http",
        Scheme::Grpc => "grpc",
    }
}

impl Target {
    /// Refuses a TCP target that is not a loopback address, unless allowed.
    pub fn check_local(&self, allow_remote: bool) -> anyhow::Result<()> {
        match &self.transport {
            Transport::Tcp(address) if !allow_remote && !address.ip().is_loopback() => bail!(
                "'{}' resolves to {}, which is not this machine; pass --allow-remote to load a \
                 server you own on another machine",
                self.label,
                address.ip()
            ),
            _ => Ok(()),
        }
    }

    /// The transport's short name: `tcp` or `uds`.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Tcp(_) => "tcp",
            Transport::Unix(_) => "uds",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_written_form_parses() {
        let t: Target = "http://127.0.0.1:8000".parse().unwrap();
        assert_eq!(t.scheme, Scheme::Http);
        assert_eq!(
            t.transport,
            Transport::Tcp("127.0.0.1:8000".parse().unwrap())
        );
        let t: Target = "grpc://localhost:8001".parse().unwrap();
        assert_eq!(t.scheme, Scheme::Grpc);
        assert!(
            matches!(t.transport, Transport::Tcp(a) if a.port() == 8001 && a.ip().is_loopback())
        );
        for (text, scheme) in [
            ("unix:/tmp/a.sock", Scheme::Http),
            ("http+unix:///tmp/a.sock", Scheme::Http),
            ("grpc+unix:/tmp/a.sock", Scheme::Grpc),
        ] {
            let t: Target = text.parse().unwrap();
            assert_eq!(t.scheme, scheme);
            assert_eq!(t.transport, Transport::Unix("/tmp/a.sock".into()));
        }
    }

    #[test]
    fn bad_targets_say_what_is_wrong() {
        for (text, says) in [
            ("127.0.0.1:8000", "unknown scheme"),
            ("localhost", "no scheme"),
            ("ftp://x:1", "unknown scheme"),
            ("https://127.0.0.1:1", "TLS"),
            ("unix:", "no socket path"),
            ("http:127.0.0.1:80", "HOST:PORT"),
        ] {
            let e = text.parse::<Target>().unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn remote_targets_need_permission() {
        let t: Target = "http://10.1.2.3:80".parse().unwrap();
        assert!(t
            .check_local(false)
            .unwrap_err()
            .to_string()
            .contains("--allow-remote"));
        assert!(t.check_local(true).is_ok());
        let t: Target = "http://[::1]:80".parse().unwrap();
        assert!(t.check_local(false).is_ok());
        let t: Target = "unix:/x".parse().unwrap();
        assert!(t.check_local(false).is_ok());
    }
}
