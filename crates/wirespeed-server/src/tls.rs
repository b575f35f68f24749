//! TLS for every listener, with rustls (ring): one certificate chain and
//! key from PEM files. ALPN offers `h2` and `http/1.1`, so REST clients get
//! either and gRPC clients get HTTP/2.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::{StartError, TlsFiles};

/// The acceptor for `files`, or why they cannot be used.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, StartError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| {
            StartError::Tls(format!(
                "cannot read certificates from {}: {e}",
                files.cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(StartError::Tls(format!(
            "{} holds no PEM certificate",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        StartError::Tls(format!(
            "cannot read a private key from {}: {e}",
            files.key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            StartError::Tls(format!(
                "{} and {} do not make a usable certificate and key: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
