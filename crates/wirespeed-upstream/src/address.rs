//! Where an upstream server listens, as a URL: `grpc://host:port`,
//! `grpcs://host:port` (TLS), `grpc+unix:///path/to.sock`, and the same
//! with `http` for servers that speak only the REST protocol. An `http`
//! URL over TCP may have a path: the base of an OpenAI API
//! (`http://host:8000/v1`, as its SDKs' `base_url`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The protocol spoken to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The Open Inference Protocol over gRPC (HTTP/2).
    Grpc,
    /// The Open Inference Protocol's REST API (HTTP/1.1), for servers that
    /// speak no gRPC.
    Http,
}

/// How the connection is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TCP to a host name or IP address.
    Tcp {
        /// The host, as written (a name, an IPv4 address, or `[v6]`).
        host: String,
        /// The port.
        port: u16,
    },
    /// A Unix socket.
    Unix(PathBuf),
}

/// One upstream server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// What it speaks.
    pub protocol: Protocol,
    /// Where it listens.
    pub transport: Transport,
    /// Whether the connection uses TLS.
    pub tls: bool,
    /// The URL's path without its trailing `/` (`/v1`); empty when it has
    /// none.
    pub path: String,
    text: String,
}

impl Address {
    /// The `Host` / `:authority` to send: `host:port`, or `localhost` over a
    /// Unix socket (the path is no authority, and servers refuse it).
    pub fn authority(&self) -> String {
        match &self.transport {
            Transport::Tcp { host, port } => format!("{host}:{port}"),
            Transport::Unix(_) => "localhost".to_owned(),
        }
    }

    /// The host to name in TLS: the host without brackets.
    pub(crate) fn server_name(&self) -> &str {
        match &self.transport {
            Transport::Tcp { host, .. } => host.trim_start_matches('[').trim_end_matches(']'),
            Transport::Unix(_) => "localhost",
        }
    }

    /// The URI scheme of requests.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Address {
    type Err = String;

    fn from_str(text: &str) -> Result<Address, String> {
        let usage = "give grpc://host:port, grpcs://host:port, grpc+unix:///path, http://host:port, https://host:port or http+unix:///path";
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("'{text}' is not an upstream URL; {usage}"))?;
        let (protocol, tls, unix) = match scheme {
            "grpc" => (Protocol::Grpc, false, false),
            "grpcs" => (Protocol::Grpc, true, false),
            "grpc+unix" => (Protocol::Grpc, false, true),
            "http" => (Protocol::Http, false, false),
            "https" => (Protocol::Http, true, false),
            "http+unix" => (Protocol::Http, false, true),
            other => {
                return Err(format!(
                    "unknown upstream scheme '{other}' in '{text}'; {usage}"
                ))
            }
        };
        let mut path = String::new();
        let transport = if unix {
            if !rest.starts_with('/') {
                return Err(format!(
                    "'{text}' needs an absolute socket path: {scheme}:///path/to.sock"
                ));
            }
            Transport::Unix(PathBuf::from(rest))
        } else {
            let (authority, rest_path) = match rest.split_once('/') {
                Some((authority, p)) => (authority, p.trim_end_matches('/')),
                None => (rest, ""),
            };
            if !rest_path.is_empty() {
                if protocol != Protocol::Http {
                    return Err(format!(
                        "'{text}' has a path; a gRPC upstream URL is only scheme://host:port"
                    ));
                }
                path = format!("/{rest_path}");
            }
            let (host, port) = authority
                .rsplit_once(':')
                .filter(|(host, _)| !host.is_empty())
                .ok_or_else(|| format!("'{text}' needs a host and a port: {scheme}://host:port"))?;
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("'{port}' in '{text}' is not a port"))?;
            Transport::Tcp {
                host: host.to_owned(),
                port,
            }
        };
        Ok(Address {
            protocol,
            transport,
            tls,
            path,
            text: text.trim_end_matches('/').to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let a: Address = "grpc://127.0.0.1:8001".parse().unwrap();
        assert_eq!(a.protocol, Protocol::Grpc);
        assert_eq!(a.authority(), "127.0.0.1:8001");
        assert!(!a.tls);
        let a: Address = "grpcs://models.internal:443".parse().unwrap();
        assert!(a.tls);
        assert_eq!(a.server_name(), "models.internal");
        let a: Address = "grpc+unix:///tmp/t.sock".parse().unwrap();
        assert_eq!(a.transport, Transport::Unix("/tmp/t.sock".into()));
        assert_eq!(a.authority(), "localhost");
        let a: Address = "http://[::1]:8080/".parse().unwrap();
        assert_eq!(a.protocol, Protocol::Http);
        assert_eq!(a.server_name(), "::1");
        assert_eq!(a.to_string(), "http://[::1]:8080");
        assert_eq!(a.path, "");
        let a: Address = "https://llm.internal:8443/v1/".parse().unwrap();
        assert_eq!(a.authority(), "llm.internal:8443");
        assert_eq!(a.path, "/v1");
    }

    #[test]
    fn mistakes_are_named() {
        for (url, says) in [
            ("localhost:8001", "not an upstream URL"),
            ("tcp://h:1", "unknown upstream scheme 'tcp'"),
            ("grpc://h", "needs a host and a port"),
            ("grpc://h:0", "is not a port"),
            ("grpc://h:1/v2", "has a path"),
            ("grpc://h/v2", "has a path"),
            ("grpc+unix://relative.sock", "absolute socket path"),
        ] {
            let e = url.parse::<Address>().unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
    }
}
