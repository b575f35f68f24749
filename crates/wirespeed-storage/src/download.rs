//! Copies objects to files: a large object in ranges fetched side by side,
//! each written at its place as its bytes arrive (a file is never held in
//! memory), each range asked for only if the object is still the one
//! listed (`If-Match` its ETag), and every file's length checked against
//! the listing's. Files past 100 MB say how far they are in the log.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::listing::Object;

/// Objects larger than this are fetched in ranges of this size.
const RANGE: u64 = 16 << 20;
/// Ranges (and small files) fetched at once.
const AT_ONCE: usize = 8;
/// Files at least this large say how far their download is.
const LOUD: u64 = 100_000_000;

/// A file to fetch: the object and where its copy goes.
pub(crate) struct Copy {
    pub object: Object,
    pub target: PathBuf,
}

/// One request: a range of one file.
struct Piece {
    file: Arc<File>,
    range: Option<Range<u64>>,
}

struct File {
    object: Object,
    target: PathBuf,
    done: AtomicU64,
}

/// Fetches every file of `copies`, or says why not.
pub(crate) async fn fetch(store: &Arc<dyn ObjectStore>, copies: Vec<Copy>) -> Result<(), String> {
    let mut pieces = Vec::new();
    for copy in copies {
        let file = Arc::new(File {
            object: copy.object,
            target: copy.target,
            done: AtomicU64::new(0),
        });
        let size = file.object.size;
        // The file at its length first: ranges write into it anywhere.
        let created = match tokio::fs::File::create(&file.target).await {
            Ok(out) => out.set_len(size).await,
            Err(e) => Err(e),
        };
        created.map_err(|e| format!("cannot write {}: {e}", file.target.display()))?;
        if size == 0 {
            continue;
        }
        if size <= RANGE {
            pieces.push(Piece { file, range: None });
            continue;
        }
        if size >= LOUD {
            tracing::info!(object = %file.object.key, bytes = size, "downloading a large file in {} ranges", size.div_ceil(RANGE));
        }
        let mut start = 0;
        while start < size {
            let end = (start + RANGE).min(size);
            pieces.push(Piece {
                file: Arc::clone(&file),
                range: Some(start..end),
            });
            start = end;
        }
    }
    futures_util::stream::iter(pieces)
        .map(|piece| fetch_piece(Arc::clone(store), piece))
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn fetch_piece(store: Arc<dyn ObjectStore>, piece: Piece) -> Result<(), String> {
    let file = &piece.file;
    let key = &file.object.key;
    let options = GetOptions {
        range: piece.range.clone().map(GetRange::Bounded),
        // A range of another object than the one listed would make a
        // file of two: the store refuses it, and the folder is fetched
        // again at a later poll.
        if_match: etag(&file.object.tag),
        ..Default::default()
    };
    let got = store
        .get_opts(&StorePath::from(key.as_str()), options)
        .await
        .map_err(|e| format!("cannot download '{key}': {}", crate::fault::cause(&e)))?;
    let start = piece.range.as_ref().map_or(0, |r| r.start);
    let want = piece
        .range
        .as_ref()
        .map_or(file.object.size, |r| r.end - r.start);
    let mut out = tokio::fs::OpenOptions::new()
        .write(true)
        .open(&file.target)
        .await
        .map_err(|e| format!("cannot write {}: {e}", file.target.display()))?;
    out.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|e| format!("cannot write {}: {e}", file.target.display()))?;
    let mut stream = got.into_stream();
    let mut written = 0u64;
    while let Some(chunk) = stream
        .try_next()
        .await
        .map_err(|e| format!("cannot download '{key}': {}", crate::fault::cause(&e)))?
    {
        written += chunk.len() as u64;
        if written > want {
            return Err(format!(
                "'{key}' sent more bytes than its listing's {}",
                file.object.size
            ));
        }
        out.write_all(&chunk)
            .await
            .map_err(|e| format!("cannot write {}: {e}", file.target.display()))?;
    }
    out.flush()
        .await
        .map_err(|e| format!("cannot write {}: {e}", file.target.display()))?;
    if written != want {
        return Err(format!(
            "'{key}' ended after {written} of {want} bytes: the object changed or the transfer broke"
        ));
    }
    let size = file.object.size;
    let before = file.done.fetch_add(written, Ordering::Relaxed);
    if size >= LOUD {
        let (was, now) = (before * 10 / size, (before + written) * 10 / size);
        if now > was {
            tracing::info!(object = %key, "downloaded {}% of {} MB", now * 10, size / 1_000_000);
        }
    }
    Ok(())
}

/// The ETag to ask for, when the listing gave one (not a time).
fn etag(tag: &str) -> Option<String> {
    (tag.starts_with('"') || tag.starts_with("W/") || !tag.contains(':')).then(|| tag.to_owned())
}
