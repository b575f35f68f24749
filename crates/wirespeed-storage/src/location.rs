//! Where a repository lives: the URL of `--models` (Triton's
//! `--model-repository`) read as the store, the bucket (or container) and
//! the prefix inside it.
//!
//! The forms are Triton's, object_store's and KServe's:
//!
//! | URL | store |
//! |---|---|
//! | `s3://bucket/prefix` | Amazon S3, or `AWS_ENDPOINT_URL`'s store |
//! | `s3://host:port/bucket/prefix` | an S3-compatible store over HTTP (Triton's form for MinIO and the like) |
//! | `s3://https://host:port/bucket/prefix` | the same over HTTPS |
//! | `gs://bucket/prefix` | Google Cloud Storage |
//! | `az://container/prefix` | Azure Blob Storage, the account from the environment |
//! | `as://account/container/prefix` | Azure Blob Storage (Triton's form) |
//! | `http(s)://host/path` | a read-only repository or one model file over HTTP |

use std::fmt;

/// A store the repository lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Amazon S3 and S3-compatible stores.
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage.
    Azure,
    /// Plain HTTP or HTTPS.
    Http,
}

/// A repository's place in object storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The store.
    pub scheme: Scheme,
    /// The bucket (S3, GCS) or container (Azure); for HTTP, the URL's
    /// scheme, host and port.
    pub bucket: String,
    /// The repository's folder inside the bucket, without slashes at
    /// either end; empty for the bucket's root.
    pub prefix: String,
    /// S3: the endpoint the URL names (Triton's `s3://host:port/...`).
    pub endpoint: Option<String>,
    /// Azure: the account the URL names (Triton's `as://account/...`).
    pub account: Option<String>,
    /// The URL as given, with any query (an Azure SAS or a signed URL's
    /// signature) left out: what messages and the log show.
    shown: String,
}

impl Location {
    /// Reads `text` as a repository URL: `None` for a local path (no
    /// `scheme://`), an error for a scheme no store here serves or a URL
    /// that names no bucket.
    pub fn parse(text: &str) -> Option<Result<Location, String>> {
        let (scheme, rest) = text.split_once("://")?;
        // A path such as `./a://b` is a path: a scheme is letters.
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return None;
        }
        Some(Self::parse_url(scheme, rest, text))
    }

    fn parse_url(scheme: &str, rest: &str, text: &str) -> Result<Location, String> {
        let shown = text.split('?').next().unwrap_or(text).to_owned();
        let unknown = || {
            format!(
                "'{shown}' is not a repository this server reads: a repository is a local \
                 folder or s3://bucket/path, s3://host:port/bucket/path, gs://bucket/path, \
                 az://container/path, as://account/container/path or http(s)://host/path"
            )
        };
        let location = |scheme, bucket: &str, prefix: &str, endpoint, account| {
            if bucket.is_empty() {
                return Err(format!("'{shown}' names no bucket or container"));
            }
            Ok(Location {
                scheme,
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
                endpoint,
                account,
                shown: shown.clone(),
            })
        };
        let first = |path: &str| -> (String, String) {
            match path.split_once('/') {
                Some((a, b)) => (a.to_owned(), b.to_owned()),
                None => (path.to_owned(), String::new()),
            }
        };
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => {
                // Triton's `s3://https://host:port/bucket/path`.
                for inner in ["http", "https"] {
                    if let Some(rest) = rest.strip_prefix(&format!("{inner}://")) {
                        let (host, path) = first(rest);
                        let (bucket, prefix) = first(&path);
                        return location(
                            Scheme::S3,
                            &bucket,
                            &prefix,
                            Some(format!("{inner}://{host}")),
                            None,
                        );
                    }
                }
                let (head, path) = first(rest);
                // A bucket's name has no ':'; Triton's `host:port` has.
                if head.contains(':') {
                    let (bucket, prefix) = first(&path);
                    return location(
                        Scheme::S3,
                        &bucket,
                        &prefix,
                        Some(format!("http://{head}")),
                        None,
                    );
                }
                location(Scheme::S3, &head, &path, None, None)
            }
            "gs" | "gcs" => {
                let (bucket, prefix) = first(rest);
                location(Scheme::Gcs, &bucket, &prefix, None, None)
            }
            "az" | "azure" => {
                let (container, prefix) = first(rest);
                location(Scheme::Azure, &container, &prefix, None, None)
            }
            "as" => {
                let (account, path) = first(rest);
                let (container, prefix) = first(&path);
                if account.is_empty() {
                    return Err(format!(
                        "'{shown}' names no account: Triton's form is as://account/container/path"
                    ));
                }
                location(Scheme::Azure, &container, &prefix, None, Some(account))
            }
            "http" | "https" => {
                // A signed URL's query would have to go with every request
                // for a folder's files; it is refused rather than dropped.
                if rest.contains('?') {
                    return Err(format!(
                        "'{shown}' carries a query (a signed URL's signature?): an HTTP \
                         repository is read without one; put the model in a bucket and give \
                         its credentials instead"
                    ));
                }
                let (host, path) = first(rest);
                location(
                    Scheme::Http,
                    &format!("{}://{host}", scheme.to_ascii_lowercase()),
                    &path,
                    None,
                    None,
                )
            }
            _ => Err(unknown()),
        }
    }

    /// The URL as messages show it (never a query, which may hold a
    /// signature).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// A name for the repository's folder in the cache: its store, bucket
    /// and prefix in file-name characters, and a hash of the whole URL so
    /// that two URLs never share a folder.
    pub fn cache_name(&self) -> String {
        let readable: String = format!("{}-{}", self.bucket, self.prefix)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        // FNV-1a: stable across runs and builds, which a cache needs.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let key = format!(
            "{:?}|{}|{}|{:?}|{:?}",
            self.scheme, self.bucket, self.prefix, self.endpoint, self.account
        );
        for b in key.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{readable}-{hash:016x}")
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Location {
        Location::parse(text).unwrap().unwrap()
    }

    #[test]
    fn a_path_is_no_url() {
        for path in ["models", "/srv/models", "./a://b", "C:models"] {
            assert!(Location::parse(path).is_none(), "{path}");
        }
    }

    #[test]
    fn tritons_and_object_stores_forms() {
        let s3 = parse("s3://bucket/path/to/repo/");
        assert_eq!(
            (s3.scheme, s3.bucket.as_str(), s3.prefix.as_str()),
            (Scheme::S3, "bucket", "path/to/repo")
        );
        assert_eq!(s3.endpoint, None);
        let minio = parse("s3://localhost:9000/bucket/repo");
        assert_eq!(minio.endpoint.as_deref(), Some("http://localhost:9000"));
        assert_eq!(
            (minio.bucket.as_str(), minio.prefix.as_str()),
            ("bucket", "repo")
        );
        let tls = parse("s3://https://store.example:443/bucket");
        assert_eq!(tls.endpoint.as_deref(), Some("https://store.example:443"));
        assert_eq!((tls.bucket.as_str(), tls.prefix.as_str()), ("bucket", ""));
        let gcs = parse("gs://b/p");
        assert_eq!(
            (gcs.scheme, gcs.bucket.as_str(), gcs.prefix.as_str()),
            (Scheme::Gcs, "b", "p")
        );
        let az = parse("az://container/p/q");
        assert_eq!(
            (az.scheme, az.bucket.as_str(), az.prefix.as_str()),
            (Scheme::Azure, "container", "p/q")
        );
        let triton_az = parse("as://account/container/p");
        assert_eq!(triton_az.account.as_deref(), Some("account"));
        assert_eq!(
            (triton_az.bucket.as_str(), triton_az.prefix.as_str()),
            ("container", "p")
        );
    }

    #[test]
    fn a_signature_is_refused_and_never_shows() {
        let err = Location::parse("https://host/models/m.onnx?sig=SECRET&se=1")
            .unwrap()
            .unwrap_err();
        assert!(err.contains("https://host/models/m.onnx"), "{err}");
        assert!(!err.contains("SECRET"), "{err}");
        let plain = parse("https://host/models/m.onnx");
        assert_eq!(
            (plain.bucket.as_str(), plain.prefix.as_str()),
            ("https://host", "models/m.onnx")
        );
    }

    #[test]
    fn unknown_schemes_and_missing_buckets_are_refused() {
        let err = Location::parse("ftp://host/models").unwrap().unwrap_err();
        assert!(err.contains("s3://bucket/path"), "{err}");
        assert!(Location::parse("s3://").unwrap().is_err());
        assert!(Location::parse("s3:///path").unwrap().is_err());
        assert!(Location::parse("as:///container").unwrap().is_err());
    }

    #[test]
    fn each_url_has_its_own_cache_folder() {
        let a = parse("s3://bucket/a").cache_name();
        let b = parse("s3://localhost:9000/bucket/a").cache_name();
        assert_ne!(a, b);
        assert_eq!(a, parse("s3://bucket/a/").cache_name());
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)),
            "{a}"
        );
    }
}
