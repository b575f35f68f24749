//! The client of a repository's store, with its credentials found as each
//! cloud's own tools find them:
//!
//! - **S3**: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`),
//!   `AWS_ENDPOINT_URL`; a web identity token as EKS gives it
//!   (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`), ECS's container
//!   credentials, then the instance's metadata. A public bucket is read
//!   unsigned with `AWS_SKIP_SIGNATURE=true` (or KServe's
//!   `awsAnonymousCredential=true`). A custom endpoint is addressed
//!   path-style (`endpoint/bucket/key`), as MinIO and SeaweedFS take it;
//!   `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true` asks for the other style.
//! - **GCS**: `GOOGLE_APPLICATION_CREDENTIALS` (or
//!   `GOOGLE_SERVICE_ACCOUNT`), then the instance's metadata;
//!   `STORAGE_EMULATOR_HOST`, which Google's client libraries honour, points
//!   at an emulator.
//! - **Azure**: `AZURE_STORAGE_ACCOUNT_NAME` and `AZURE_STORAGE_ACCOUNT_KEY`
//!   (or Triton's `AZURE_STORAGE_ACCOUNT` and `AZURE_STORAGE_KEY`),
//!   `AZURE_STORAGE_SAS_KEY`, `AZURE_STORAGE_CONNECTION_STRING`, a workload
//!   identity, then managed identity; `AZURE_STORAGE_USE_EMULATOR=true` for
//!   Azurite.
//!
//! No secret is ever logged: the log names where credentials came from,
//! never what they are.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::location::{Location, Scheme};

/// How long to wait for a connection, and for one request whole (a range
/// of a large file is one request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The client of `location`'s store. Builds no connection: the first
/// listing finds out whether the store answers.
pub(crate) fn store(location: &Location) -> Result<Arc<dyn ObjectStore>, String> {
    // reqwest's rustls takes the process's crypto provider: ring, as the
    // server's own TLS. Installed once; a second call finds it there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let yes = |key: &str| env(key).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    let mut options = ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    // Retries within one call stay short: a poll that fails is tried
    // again at a later poll, with its own backoff (mirror.rs).
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(20),
    };
    let built: Result<Arc<dyn ObjectStore>, object_store::Error> = match location.scheme {
        Scheme::S3 => {
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(&location.bucket)
                .with_retry(retry);
            let endpoint = location
                .endpoint
                .clone()
                .or_else(|| env("AWS_ENDPOINT_URL"));
            if let Some(endpoint) = &endpoint {
                options = options.with_allow_http(endpoint.starts_with("http://"));
                builder = builder.with_endpoint(endpoint);
            }
            if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
                builder = builder.with_region("us-east-1");
            }
            if yes("awsAnonymousCredential") {
                builder = builder.with_skip_signature(true);
            }
            builder
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as _)
        }
        Scheme::Gcs => {
            let mut builder = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&location.bucket)
                .with_retry(retry);
            if let Some(host) = env("STORAGE_EMULATOR_HOST") {
                let base = if host.contains("://") {
                    host
                } else {
                    format!("http://{host}")
                };
                options = options.with_allow_http(base.starts_with("http://"));
                builder = builder.with_base_url(base.trim_end_matches('/'));
                // An emulator takes any request; without a service account
                // the client would ask the instance's metadata for a token.
                if env("GOOGLE_APPLICATION_CREDENTIALS").is_none() {
                    builder = builder.with_skip_signature(true);
                }
            }
            builder
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as _)
        }
        Scheme::Azure => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_container_name(&location.bucket)
                .with_retry(retry);
            // Triton's names for the account and its key.
            if let Some(account) = env("AZURE_STORAGE_ACCOUNT") {
                builder = builder.with_account(account);
            }
            if let Some(key) = env("AZURE_STORAGE_KEY") {
                builder = builder.with_access_key(key);
            }
            if let Some(connection) = env("AZURE_STORAGE_CONNECTION_STRING") {
                builder = with_connection_string(builder, &connection, &mut options);
            }
            if let Some(account) = &location.account {
                builder = builder.with_account(account);
            }
            if let Some(endpoint) = env("AZURE_STORAGE_ENDPOINT") {
                options = options.with_allow_http(endpoint.starts_with("http://"));
            }
            builder
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as _)
        }
        Scheme::Http => {
            options = options.with_allow_http(location.bucket.starts_with("http://"));
            HttpBuilder::new()
                .with_url(&location.bucket)
                .with_retry(retry)
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as _)
        }
    };
    built.map_err(|e| format!("cannot set up its client: {}", crate::fault::chain(&e)))
}

/// Azure's connection string (`AccountName=...;AccountKey=...;
/// BlobEndpoint=...` or `SharedAccessSignature=...`), as Azure's own tools
/// and Azurite's documentation give it.
fn with_connection_string(
    mut builder: MicrosoftAzureBuilder,
    connection: &str,
    options: &mut ClientOptions,
) -> MicrosoftAzureBuilder {
    use object_store::azure::AzureConfigKey;
    for part in connection.split(';') {
        let Some((key, value)) = part.split_once('=') else {
            continue;
        };
        match key.trim() {
            "AccountName" => builder = builder.with_account(value),
            "AccountKey" => builder = builder.with_access_key(value),
            "SharedAccessSignature" => {
                builder = builder.with_config(AzureConfigKey::SasKey, value);
            }
            "BlobEndpoint" => {
                let endpoint = value.trim_end_matches('/');
                *options = options
                    .clone()
                    .with_allow_http(endpoint.starts_with("http://"));
                // Azurite's endpoint carries its account in the path, and
                // is addressed as given.
                builder = builder.with_endpoint(endpoint.to_owned());
            }
            _ => {}
        }
    }
    builder
}
