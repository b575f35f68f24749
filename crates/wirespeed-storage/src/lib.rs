//! Model repositories in object storage: S3 and S3-compatible stores
//! (MinIO, SeaweedFS, Ceph), Google Cloud Storage, Azure Blob Storage, and
//! plain HTTP, read through Apache Arrow's `object_store` (no request
//! signing written here).
//!
//! A repository in a store is mirrored into a local folder, and the server
//! reads that folder as it reads any repository: every layout (Triton's,
//! MLServer's, KServe's, wirespeed's own) works from a bucket unchanged. A
//! model's folder is fetched whole before it is put in place, so a load
//! never reads half a model; while serving, [`Mirror::refresh`] fetches a
//! changed folder once its listing holds still for a poll.
//!
//! ```no_run
//! # async fn example() -> Result<(), wirespeed_storage::StorageError> {
//! use wirespeed_storage::{Location, Mirror, MirrorOptions};
//!
//! let location = Location::parse("s3://models/triton").unwrap().unwrap();
//! let mirror = Mirror::open(location, MirrorOptions::default())?;
//! let failed = mirror.start().await?;
//! assert!(failed.is_empty());
//! println!("serve {}", mirror.local_dir().display());
//! # Ok(())
//! # }
//! ```

mod download;
mod fault;
mod listing;
mod location;
mod mirror;
mod stores;

pub use location::{Location, Scheme};
pub use mirror::{Mirror, MirrorOptions, StorageError};

/// `text` as a repository in object storage: `None` for a local path, an
/// error for a URL no store here reads.
pub fn repository_url(text: &str) -> Option<Result<Location, String>> {
    Location::parse(text)
}

/// The repositories of `--models` in object storage, each copied.
#[derive(Debug, Clone, Default)]
pub struct Remotes {
    /// Each repository in a store, in the order given.
    pub mirrors: Vec<std::sync::Arc<Mirror>>,
    /// Model folders that could not be fetched at start, and why.
    pub failed: Vec<(String, String)>,
}

/// Copies every repository of `repositories` that is a URL, and puts its
/// local copy in its place; local folders stay as they are. An error if
/// one cannot be read at all (unreachable, refused, empty).
pub async fn open_repositories(
    repositories: &mut [std::path::PathBuf],
    options: &MirrorOptions,
) -> Result<Remotes, StorageError> {
    let mut remotes = Remotes::default();
    for repository in repositories.iter_mut() {
        let Some(text) = repository.to_str() else {
            continue;
        };
        let Some(location) = Location::parse(text) else {
            continue;
        };
        let location = location.map_err(|cause| StorageError {
            url: text.split('?').next().unwrap_or(text).to_owned(),
            cause,
        })?;
        let mirror = Mirror::open(location, options.clone())?;
        let url = mirror.url().to_owned();
        let failed = mirror.start().await?;
        remotes.failed.extend(
            failed
                .into_iter()
                .map(|(name, why)| (name, format!("cannot fetch its files from {url}: {why}"))),
        );
        *repository = mirror.local_dir().to_owned();
        remotes.mirrors.push(std::sync::Arc::new(mirror));
    }
    Ok(remotes)
}
