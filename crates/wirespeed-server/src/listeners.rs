//! The server's sockets, bound before it serves: REST and gRPC on TCP
//! (and on TF Serving's ports), on Unix sockets, and the metrics listener,
//! each bound from its flag, which a failure names.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::config::{ServerConfig, StartError};
use crate::net::{listen, uds};

/// Every listener the configuration asks for, bound.
pub(crate) struct Listeners {
    pub(crate) http_tcp: Option<TcpListener>,
    pub(crate) http_uds: Option<(UnixListener, PathBuf)>,
    pub(crate) grpc_tcp: Option<TcpListener>,
    pub(crate) tf_http_tcp: Option<TcpListener>,
    pub(crate) tf_grpc_tcp: Option<TcpListener>,
    pub(crate) grpc_uds: Option<(UnixListener, PathBuf)>,
    pub(crate) metrics_tcp: Option<TcpListener>,
}

impl Listeners {
    /// Whether `config` asks for any API listener (the metrics listener
    /// alone serves no model).
    pub(crate) fn any(config: &ServerConfig) -> bool {
        config.http_addr.is_some()
            || config.http_uds.is_some()
            || config.grpc_addr.is_some()
            || config.grpc_uds.is_some()
            || config.tf_http_addr.is_some()
            || config.tf_grpc_addr.is_some()
    }

    /// Binds every listener `config` asks for.
    pub(crate) async fn bind(config: &ServerConfig) -> Result<Listeners, StartError> {
        let http_tcp = bind_tcp("--http", config.http_addr).await?;
        let grpc_tcp = bind_tcp("--grpc", config.grpc_addr).await?;
        let tf_http_tcp = bind_tcp("--tf-http", config.tf_http_addr).await?;
        let tf_grpc_tcp = bind_tcp("--tf-grpc", config.tf_grpc_addr).await?;
        let http_uds = config
            .http_uds
            .as_deref()
            .map(|p| bind_unix("--http-uds", p))
            .transpose()?;
        let grpc_uds = config
            .grpc_uds
            .as_deref()
            .map(|p| bind_unix("--grpc-uds", p))
            .transpose()?;
        let metrics_tcp =
            bind_tcp("--metrics", config.metrics.as_ref().and_then(|m| m.addr)).await?;
        Ok(Listeners {
            http_tcp,
            http_uds,
            grpc_tcp,
            tf_http_tcp,
            tf_grpc_tcp,
            grpc_uds,
            metrics_tcp,
        })
    }

    /// A TCP listener's address (the real port when bound to port 0).
    pub(crate) fn addr(listener: &Option<TcpListener>) -> Option<SocketAddr> {
        listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The "listening on" lines, the metrics listener first (a line for
    /// the APIs then tells that everything listens already), and the Unix
    /// socket files to remove at the end.
    pub(crate) fn listening(&self, scheme: &str) -> (Vec<String>, Vec<PathBuf>) {
        let mut listening: Vec<String> = Listeners::addr(&self.metrics_tcp)
            .map(|a| format!("metrics http{scheme}://{a}/metrics"))
            .into_iter()
            .collect();
        listening.extend(Listeners::addr(&self.http_tcp).map(|a| format!("http{scheme}://{a}")));
        listening.extend(Listeners::addr(&self.grpc_tcp).map(|a| format!("grpc{scheme}://{a}")));
        // Named, so that a reader of the log (or a test) tells them apart.
        let tf_http = Listeners::addr(&self.tf_http_tcp);
        listening.extend(tf_http.map(|a| format!("TF Serving's REST port http{scheme}://{a}")));
        let tf_grpc = Listeners::addr(&self.tf_grpc_tcp);
        listening.extend(tf_grpc.map(|a| format!("TF Serving's gRPC port grpc{scheme}://{a}")));
        let mut sockets = Vec::new();
        for (_, path) in self.http_uds.iter() {
            listening.push(format!("http{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
        for (_, path) in self.grpc_uds.iter() {
            listening.push(format!("grpc{scheme}+unix://{}", path.display()));
            sockets.push(path.clone());
        }
        (listening, sockets)
    }

    /// The listeners as the I/O threads take them: TF Serving's ports
    /// beside the APIs' own.
    pub(crate) fn into_sockets(self) -> std::io::Result<listen::Sockets> {
        listen::Sockets::new(
            self.http_tcp.into_iter().chain(self.tf_http_tcp).collect(),
            self.http_uds.map(|(l, _)| l),
            self.grpc_tcp.into_iter().chain(self.tf_grpc_tcp).collect(),
            self.grpc_uds.map(|(l, _)| l),
            self.metrics_tcp,
        )
    }
}

/// The listener of `flag` at `addr`, when the flag gives one.
async fn bind_tcp(
    flag: &'static str,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, StartError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|error| StartError::Bind {
            flag,
            addr: addr.to_string(),
            error,
        })
}

fn bind_unix(flag: &'static str, path: &Path) -> Result<(UnixListener, PathBuf), StartError> {
    uds::bind(path)
        .map(|listener| (listener, path.to_owned()))
        .map_err(|error| StartError::Bind {
            flag,
            addr: path.display().to_string(),
            error,
        })
}
