//! A repository's listing: its objects grouped by the model folder each
//! lies in (the first part of its key under the prefix), each with what
//! tells a change: size and ETag (or the time it was written where a store
//! gives no ETag). Files at the prefix's root (MLServer's `settings.json`,
//! a KServe model's one file) are a folder of their own, named `""`.

use std::collections::BTreeMap;

use futures_util::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::location::{Location, Scheme};

/// One object, as the listing gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Object {
    /// Its key in the store.
    pub key: String,
    /// Its length in bytes.
    pub size: u64,
    /// Its ETag, or when it was last written where the store gives none.
    pub tag: String,
}

/// A model folder's objects, by their path in the folder ("1/model.onnx").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Folder {
    pub files: BTreeMap<String, Object>,
    /// Why the folder cannot be copied as it is (a key that would land
    /// outside it), if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Folder {
    /// The bytes of all its files.
    pub(crate) fn bytes(&self) -> u64 {
        self.files.values().map(|o| o.size).sum()
    }
}

/// The repository's folders by name; `""` holds the files at its root.
pub(crate) type Listing = BTreeMap<String, Folder>;

/// Lists the repository at `location`, or the one folder `only` of it.
pub(crate) async fn list(
    store: &dyn ObjectStore,
    location: &Location,
    only: Option<&str>,
) -> Result<Listing, object_store::Error> {
    let mut listing = Listing::new();
    let mut prefix = location.prefix.clone();
    if let Some(folder) = only {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(folder);
    }
    // A URL that names one object (KServe's `storageUri` to a model file):
    // the repository is that file, at its root. Plain HTTP has no listing
    // but WebDAV's, so a file is asked for first there.
    let single = |meta: object_store::ObjectMeta| {
        let name = meta.location.filename().unwrap_or_default().to_owned();
        let mut root = Folder::default();
        root.files.insert(name, object(&meta));
        Listing::from([(String::new(), root)])
    };
    if location.scheme == Scheme::Http && only.is_none() {
        if let Ok(meta) = store.head(&StorePath::from(location.prefix.as_str())).await {
            return Ok(single(meta));
        }
    }
    let under = (!prefix.is_empty()).then(|| StorePath::from(prefix.as_str()));
    let mut objects = store.list(under.as_ref());
    let mut any = false;
    while let Some(meta) = objects.try_next().await? {
        any = true;
        let key = meta.location.as_ref();
        let relative = match &under {
            Some(p) => key
                .strip_prefix(p.as_ref())
                .unwrap_or(key)
                .trim_start_matches('/'),
            None => key,
        };
        let relative = match only {
            Some(folder) => format!("{folder}/{relative}"),
            None => relative.to_owned(),
        };
        // A "folder" marker object (`path/`, as consoles make them).
        if relative.is_empty() || relative.ends_with('/') {
            continue;
        }
        let (folder, path) = match relative.split_once('/') {
            Some((folder, path)) => (folder.to_owned(), path.to_owned()),
            None => (String::new(), relative.clone()),
        };
        let entry = listing.entry(folder).or_default();
        if let Err(why) = check_path(&path) {
            entry.refused.get_or_insert(format!("object '{key}' {why}"));
            continue;
        }
        entry.files.insert(path, object(&meta));
    }
    if !any && only.is_none() && !location.prefix.is_empty() {
        if let Ok(meta) = store.head(&StorePath::from(location.prefix.as_str())).await {
            return Ok(single(meta));
        }
    }
    Ok(listing)
}

fn object(meta: &object_store::ObjectMeta) -> Object {
    Object {
        key: meta.location.as_ref().to_owned(),
        size: meta.size,
        tag: meta
            .e_tag
            .clone()
            .unwrap_or_else(|| meta.last_modified.to_rfc3339()),
    }
}

/// Whether `path` (a key under its model's folder) is a relative path that
/// stays inside the folder.
pub(crate) fn check_path(path: &str) -> Result<(), &'static str> {
    if path.starts_with('/') || path.contains('\\') || path.contains('\0') {
        return Err("is no relative path inside the model's folder");
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == ".." || part.len() > 255)
    {
        return Err("would land outside the model's folder (an empty, '.' or '..' part, or one past 255 bytes)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_stays_in_its_folder() {
        for inside in ["config.pbtxt", "1/model.onnx", "1/sub/weights.bin", "a..b"] {
            assert!(check_path(inside).is_ok(), "{inside}");
        }
        for outside in [
            "../x",
            "1/../../x",
            "/etc/passwd",
            "1//x",
            "./x",
            "1/.",
            "a\\..\\b",
            "",
        ] {
            assert!(check_path(outside).is_err(), "{outside}");
        }
    }
}
