//! Where the server is: `host:port` (tritonclient's form), an `http://`
//! URL, or a Unix socket as `unix:///path/to.sock`.

use std::path::PathBuf;

use crate::ClientError;

/// A server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A TCP address.
    Tcp {
        /// The host name or IP address.
        host: String,
        /// The port.
        port: u16,
        /// The path prefix under which the server's API is (usually empty).
        prefix: String,
    },
    /// A Unix domain socket.
    Unix(PathBuf),
}

impl Target {
    /// Parses `localhost:8000`, `http://host:8000/prefix`, `host` (port
    /// 80), `[::1]:8000` or `unix:///run/wirespeed.sock`.
    pub fn parse(url: &str) -> Result<Target, ClientError> {
        let bad = |reason: &str| ClientError::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = url
            .strip_prefix("unix://")
            .or_else(|| url.strip_prefix("unix:"))
        {
            if path.is_empty() {
                return Err(bad(
                    "a Unix socket needs a path, as in unix:///run/wirespeed.sock",
                ));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if url.starts_with("https://") {
            return Err(bad(
                "TLS is not supported by this client; use http:// or a Unix socket",
            ));
        }
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, tail) = bracketed
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs its closing ']'"))?;
            (host, tail.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| bad("the port is not a number from 0 to 65535"))?,
            None => 80,
        };
        Ok(Target::Tcp {
            host: host.to_owned(),
            port,
            prefix: prefix.to_owned(),
        })
    }

    /// The `Host` header's value.
    pub(crate) fn host_header(&self) -> String {
        match self {
            Target::Tcp { host, port, .. } if host.contains(':') => format!("[{host}]:{port}"),
            Target::Tcp { host, port, .. } => format!("{host}:{port}"),
            Target::Unix(_) => "localhost".to_owned(),
        }
    }

    /// The path prefix every request path starts with.
    pub(crate) fn prefix(&self) -> &str {
        match self {
            Target::Tcp { prefix, .. } => prefix,
            Target::Unix(_) => "",
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp { .. } => write!(f, "{}{}", self.host_header(), self.prefix()),
            Target::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_users_write() {
        let tcp = |host: &str, port, prefix: &str| Target::Tcp {
            host: host.into(),
            port,
            prefix: prefix.into(),
        };
        assert_eq!(
            Target::parse("localhost:8000").unwrap(),
            tcp("localhost", 8000, "")
        );
        assert_eq!(
            Target::parse("http://10.0.0.1:9/api/").unwrap(),
            tcp("10.0.0.1", 9, "/api")
        );
        assert_eq!(Target::parse("[::1]:8000").unwrap(), tcp("::1", 8000, ""));
        assert_eq!(
            Target::parse("[::1]:8000").unwrap().host_header(),
            "[::1]:8000"
        );
        assert_eq!(Target::parse("example").unwrap(), tcp("example", 80, ""));
        assert_eq!(
            Target::parse("unix:///run/w.sock").unwrap(),
            Target::Unix("/run/w.sock".into())
        );
        assert!(Target::parse("localhost:http").is_err());
        assert!(Target::parse("https://x:1").is_err());
        assert!(Target::parse("unix://").is_err());
    }
}
