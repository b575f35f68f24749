//! Opening a connection to an upstream: TCP (with TCP_NODELAY), a Unix
//! socket, or TLS over TCP (rustls, ALPN `h2` for gRPC and `http/1.1` for
//! REST), within a connect timeout.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::address::{Address, Protocol, Transport};

/// An open connection, whichever way it was made.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Trust for TLS upstreams: the CA file's certificates when one is given,
/// else the system's roots.
pub(crate) fn tls_connector(
    ca_file: Option<&Path>,
    protocol: Protocol,
) -> Result<TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("cannot read CA certificates from {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    format!("a certificate in {} is not usable: {e}", path.display())
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(
                    "no system CA certificates were found; name the upstream's CA with ca_file"
                        .to_owned(),
                );
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = match protocol {
        Protocol::Grpc => vec![b"h2".to_vec()],
        Protocol::Http => vec![b"http/1.1".to_vec()],
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Connects to `address` within `timeout`.
pub(crate) async fn connect(
    address: &Address,
    tls: Option<&TlsConnector>,
    timeout: Duration,
) -> io::Result<Stream> {
    let connecting = async {
        match &address.transport {
            Transport::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
            Transport::Tcp { host, port } => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let tcp = TcpStream::connect((host, *port)).await?;
                tcp.set_nodelay(true)?;
                match (address.tls, tls) {
                    (true, Some(connector)) => {
                        let name = ServerName::try_from(address.server_name().to_owned())
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                        let stream = connector.connect(name, tcp).await?;
                        Ok(Stream::Tls(Box::new(stream)))
                    }
                    _ => Ok(Stream::Tcp(tcp)),
                }
            }
        }
    };
    tokio::time::timeout(timeout, connecting)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {timeout:?}"),
            ))
        })
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
