//! A staging root on object storage (feature `s3`): `s3://bucket/prefix`, through the
//! `object_store` crate's S3 store, never a hand-written client.
//!
//! The store is built with `AmazonS3Builder::from_env` (credentials, region and endpoint the
//! way the AWS tools take them: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for an S3-compatible server, `AWS_ALLOW_HTTP` for a plain-HTTP one), with
//! a bounded retry of time-outs, 5xx, throttling and resets ([`retry_config`]). Every call blocks
//! on one small runtime of the process's, so the store's synchronous operations use object
//! storage as they use the file system.
//!
//! An object's key is `<prefix>/<staging_rel>/<file>`: the same relative paths as under a local
//! root (sanitised by `rules::ids`), so every rule that names a staging path holds unchanged.
//!
//! Invariant: no credential appears in a message: errors carry the object's URL and the
//! client's own words, which never include the secret (it signs requests, it is never sent).
//! Invariant: a read that cannot finish (the object replaced while read: its ETag is pinned;
//! the server unreachable past the retries) is an I/O error the caller may retry, never a
//! verdict; a write whose outcome is unknown is [`crate::ErrorKind::OutcomeUnknown`].

use std::io::{self, Read};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::error::{Error, Result};

/// The URL scheme of a staging root on S3-compatible object storage.
pub(crate) const S3_SCHEME: &str = "s3://";

/// How many bytes one ranged GET of a streamed read asks for (a window).
const READ_CHUNK_BYTES: u64 = 8 * 1024 * 1024;

/// How many windows an open object and the readers cloned from it keep, most recent first: a
/// Parquet reader reads each column chunk's pages in order, several column chunks in turn, and
/// asks for each page's header and body apart; served from the windows, a page costs no request
/// of its own. The memory an open object holds is at most this many windows.
const WINDOWS_KEPT: usize = 4;

/// The retries of every request: up to 5, backing off from 100 ms to 5 s, at most 60 s in all
/// (then the operation fails: a read with an I/O error, a write with an unknown outcome).
pub(crate) fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5), base: 2.0 },
        max_retries: 5,
        retry_timeout: Duration::from_secs(60),
    }
}

/// Whether `location` names a staging root on object storage (`s3://...`).
pub(crate) fn is_object_url(location: &std::path::Path) -> bool {
    location.to_str().is_some_and(|s| s.starts_with(S3_SCHEME))
}

/// What a listing or a HEAD saw of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectSeen {
    /// Relative to the root's prefix (`/`-separated).
    pub(crate) rel: String,
    pub(crate) size_bytes: u64,
    /// Milliseconds since the epoch.
    pub(crate) last_modified_ms: u64,
    /// The store's entity tag, if it gave one.
    pub(crate) e_tag: Option<String>,
}

/// A staging root on object storage: the bucket, the prefix inside it, the client and the
/// runtime its calls block on.
pub(crate) struct ObjectRoot {
    /// `s3://bucket` or `s3://bucket/prefix`, without a trailing `/`.
    url: String,
    /// The prefix inside the bucket ("" for the bucket's root).
    prefix: String,
    /// The bucket.
    bucket: String,
    store: Arc<dyn ObjectStore>,
    runtime: &'static tokio::runtime::Runtime,
}

/// The runtime every object root's calls block on: one per process, as the PostgreSQL layer's,
/// so that no root owns a runtime it would have to drop (which tokio forbids inside another
/// runtime, as in the server) and a root costs no threads of its own.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("manifestdb-s3")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::io("starting the object-storage runtime", io::Error::other(e.clone())))
}

impl std::fmt::Debug for ObjectRoot {
    // The URL only: the client's configuration holds the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRoot").field("url", &self.url).finish()
    }
}

/// Splits `s3://bucket/prefix` into the bucket and the prefix, checking each prefix component
/// as a staging name is checked (no empty, `.` or `..` component).
pub(crate) fn parse_url(url: &str) -> Result<(String, String)> {
    let refuse = |why: &str| Error::invalid("staging root URL", url, why.to_owned());
    let rest = url.strip_prefix(S3_SCHEME).ok_or_else(|| refuse("does not start with s3://"))?;
    let rest = rest.trim_end_matches('/');
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(refuse("names no bucket (s3://BUCKET/PREFIX)"));
    }
    if bucket.contains(['@', ':', '?', '#']) || url.contains(['?', '#']) {
        return Err(refuse("must be s3://BUCKET/PREFIX: no credentials, port, query or fragment (credentials come from the environment)"));
    }
    if !prefix.is_empty() && prefix.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(refuse("has an empty, `.` or `..` component in its prefix"));
    }
    Ok((bucket.to_owned(), prefix.to_owned()))
}

impl ObjectRoot {
    /// Opens the root at `url` (`s3://bucket/prefix`) with the client configured from the
    /// environment. Contacts nothing yet.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or an unusable configuration.
    pub(crate) fn connect(url: &str) -> Result<ObjectRoot> {
        let (bucket, prefix) = parse_url(url)?;
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&bucket).with_retry(retry_config());
        // Bounded time-outs unless the environment sets its own (the client options the
        // environment gave, `AWS_ALLOW_HTTP` among them, are kept).
        for (key, value) in [(ClientConfigKey::Timeout, "30s"), (ClientConfigKey::ConnectTimeout, "5s")] {
            let key = AmazonS3ConfigKey::Client(key);
            if builder.get_config_value(&key).is_none() {
                builder = builder.with_config(key, value);
            }
        }
        let store = builder.build().map_err(|e| {
            Error::invalid("staging root URL", url, format!("cannot configure an S3 client for it: {}", scrub(&e.to_string())))
        })?;
        let runtime = runtime()?;
        let url = if prefix.is_empty() { format!("{S3_SCHEME}{bucket}") } else { format!("{S3_SCHEME}{bucket}/{prefix}") };
        Ok(ObjectRoot { url, prefix, bucket, store: Arc::new(store), runtime })
    }

    /// The root's URL, `s3://bucket/prefix`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The bucket the root is in.
    #[cfg_attr(not(feature = "delta"), allow(dead_code, reason = "only a Delta table on object storage reads it"))]
    pub(crate) fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix inside the bucket (`""` for the bucket's root).
    #[cfg_attr(not(feature = "delta"), allow(dead_code, reason = "only a Delta table on object storage reads it"))]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The root's client (scoped to its bucket, with its retries and time-outs), for the Delta
    /// kernel's engine on a table below a view root.
    #[cfg(feature = "delta")]
    pub(crate) fn client(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }

    /// A server-side copy of `from`'s object `from_rel` to `to_rel` below this root (both roots
    /// in one bucket: S3's `CopyObject`, no data through the client). `Ok(false)` if the source
    /// is missing. A copy replaces what is at `to_rel`, so a copy again is harmless.
    ///
    /// # Errors
    /// As [`ObjectRoot::put`] (a copy whose answer never came may or may not have landed).
    #[cfg(feature = "delta")]
    pub(crate) fn copy_from(&self, from: &ObjectRoot, from_rel: &str, to_rel: &str) -> Result<bool> {
        let source = from.key(from_rel).map_err(|e| Error::io(format!("copying {}", from.url_of(from_rel)), e))?;
        let dest = self.key(to_rel).map_err(|e| Error::io(format!("copying to {}", self.url_of(to_rel)), e))?;
        match self.block_on(self.store.copy(&source, &dest)) {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(write_error("copying an object", &self.url_of(to_rel), e)),
        }
    }

    /// The URL of `rel` below the root.
    pub(crate) fn url_of(&self, rel: &str) -> String {
        if rel.is_empty() { self.url.clone() } else { format!("{}/{rel}", self.url) }
    }

    /// The object key of `rel` (a `/`-separated path below the root).
    fn key(&self, rel: &str) -> io::Result<ObjectPath> {
        let full = match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        };
        ObjectPath::parse(&full).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("not an object key: {e}")))
    }

    /// Relative to the root: the key's text without the prefix.
    fn rel_of(&self, key: &ObjectPath) -> Option<String> {
        let key = key.as_ref();
        if self.prefix.is_empty() {
            return Some(key.to_owned());
        }
        key.strip_prefix(self.prefix.as_str()).and_then(|r| r.strip_prefix('/')).map(str::to_owned)
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// What a HEAD of `rel` sees: `None` if no object is there.
    ///
    /// # Errors
    /// An I/O error once the retries are spent (a fault to retry).
    pub(crate) fn head(&self, rel: &str) -> io::Result<Option<ObjectSeen>> {
        let key = self.key(rel)?;
        match self.block_on(self.store.head(&key)) {
            Ok(meta) => Ok(Some(seen(rel.to_owned(), &meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(read_error(&self.url_of(rel), e)),
        }
    }

    /// Size and, with `checksum`, the CRC32 of the object `rel` (read whole, streamed, with its
    /// ETag pinned so a replacement while it is read is an error, not a mixed checksum).
    /// `None` if no object is there.
    ///
    /// # Errors
    /// An I/O error once the retries are spent, or if the object changed while it was read.
    pub(crate) fn observe(self: &Arc<Self>, rel: &str, checksum: bool) -> io::Result<Option<(u64, Option<u32>)>> {
        let Some(head) = self.head(rel)? else { return Ok(None) };
        if !checksum {
            return Ok(Some((head.size_bytes, None)));
        }
        let Some(mut file) = self.open_seen(head) else { return Ok(None) };
        let mut hasher = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let crc = hasher.finalize();
        Ok(Some((file.len(), Some(crc))))
    }

    /// Opens `rel` for a streamed read: `None` if no object is there.
    ///
    /// # Errors
    /// As [`ObjectRoot::head`].
    pub(crate) fn open(self: &Arc<Self>, rel: &str) -> io::Result<Option<ObjectFile>> {
        Ok(self.head(rel)?.and_then(|head| self.open_seen(head)))
    }

    fn open_seen(self: &Arc<Self>, head: ObjectSeen) -> Option<ObjectFile> {
        let key = self.key(&head.rel).ok()?;
        Some(ObjectFile {
            root: Arc::clone(self),
            key,
            url: self.url_of(&head.rel),
            size: head.size_bytes,
            e_tag: head.e_tag,
            pos: 0,
            chunk: Bytes::new(),
            windows: Windows::default(),
            fault: FaultCell::default(),
        })
    }

    /// Every object below `rel` (`""`: the whole root), with its size and last-modified time,
    /// in key order.
    ///
    /// # Errors
    /// An I/O error once the retries are spent.
    pub(crate) fn list(&self, rel: &str) -> io::Result<Vec<ObjectSeen>> {
        let prefix = if rel.is_empty() && self.prefix.is_empty() { None } else { Some(self.key(rel)?) };
        let url = self.url_of(rel);
        let mut out = Vec::new();
        self.block_on(async {
            let mut stream = self.store.list(prefix.as_ref());
            while let Some(item) = stream.next().await {
                let meta = item.map_err(|e| read_error(&url, e))?;
                if let Some(rel) = self.rel_of(&meta.location) {
                    out.push(seen(rel, &meta));
                }
            }
            Ok::<(), io::Error>(())
        })?;
        out.sort_by(|a, b| a.rel.cmp(&b.rel));
        Ok(out)
    }

    /// Whether the root holds any object but `except` (its marker): stops at the first one, so
    /// a store's open costs one listing page, not a listing of every attempt's objects.
    ///
    /// # Errors
    /// An I/O error once the retries are spent.
    pub(crate) fn holds_other_than(&self, except: &str) -> io::Result<bool> {
        let prefix = if self.prefix.is_empty() { None } else { Some(self.key("")?) };
        let url = self.url.clone();
        self.block_on(async {
            let mut stream = self.store.list(prefix.as_ref());
            while let Some(item) = stream.next().await {
                let meta = item.map_err(|e| read_error(&url, e))?;
                if self.rel_of(&meta.location).is_some_and(|rel| rel != except) {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }

    /// Writes `bytes` as the object `rel`; durable once acknowledged.
    ///
    /// # Errors
    /// [`Error::Storage`] of kind `OutcomeUnknown` if the request was sent and no answer came
    /// back after the retries: the object may or may not be there.
    pub(crate) fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        let key = self.key(rel).map_err(|e| Error::io(format!("writing {}", self.url_of(rel)), e))?;
        self.block_on(self.store.put(&key, PutPayload::from(bytes)))
            .map(drop)
            .map_err(|e| write_error("writing an object", &self.url_of(rel), e))
    }

    /// Deletes the object `rel` (deleting a missing one succeeds).
    ///
    /// # Errors
    /// As [`ObjectRoot::put`].
    pub(crate) fn delete(&self, rel: &str) -> Result<()> {
        let key = self.key(rel).map_err(|e| Error::io(format!("deleting {}", self.url_of(rel)), e))?;
        match self.block_on(self.store.delete(&key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(write_error("deleting an object", &self.url_of(rel), e)),
        }
    }

    /// Reads the small object `rel` whole, at most `max_bytes` of it: `None` if it is missing.
    ///
    /// # Errors
    /// An I/O error once the retries are spent.
    pub(crate) fn read_small(self: &Arc<Self>, rel: &str, max_bytes: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(file) = self.open(rel)? else { return Ok(None) };
        let mut out = Vec::new();
        file.take(max_bytes).read_to_end(&mut out)?;
        Ok(Some(out))
    }
}

/// What a listing or a HEAD says of an object, in one form: the last-modified time in whole
/// seconds (a HEAD's `Last-Modified` has no finer resolution, a listing may), the entity tag
/// without its quotes (servers quote it in one answer and not in the other), so both describe an
/// unchanged object alike.
fn seen(rel: String, meta: &object_store::ObjectMeta) -> ObjectSeen {
    ObjectSeen {
        rel,
        size_bytes: meta.size,
        last_modified_ms: u64::try_from(meta.last_modified.timestamp()).unwrap_or(0).saturating_mul(1000),
        e_tag: meta.e_tag.as_deref().map(|tag| tag.trim_matches('"').to_owned()),
    }
}

/// Removes anything that looks like a credential from a client's message: the client never
/// puts the secret in one, but a configuration error may quote a value it was given.
fn scrub(message: &str) -> String {
    let mut out = message.to_owned();
    for var in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"] {
        if let Ok(value) = std::env::var(var)
            && value.len() >= 4
        {
            out = out.replace(&value, "<redacted>");
        }
    }
    out
}

/// A client's error with the chain of its causes (the client's own words: a request's URL,
/// never a credential, which only signs requests), scrubbed all the same.
fn describe(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(inner) = cause {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = inner.source();
    }
    scrub(&text)
}

/// A failed read as an I/O error naming the object (a fault to retry).
fn read_error(url: &str, e: object_store::Error) -> io::Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::Precondition { .. } => io::ErrorKind::Interrupted,
        _ => io::ErrorKind::Other,
    };
    let what = match &e {
        object_store::Error::Precondition { .. } => "it was replaced while it was read (read it again)".to_owned(),
        other => describe(other),
    };
    io::Error::new(kind, format!("{url}: {what}"))
}

/// A failed write: the request may have been carried out (a time-out, a reset, a 5xx after the
/// retries), so its outcome is unknown unless the server refused it outright.
fn write_error(context: &'static str, url: &str, e: object_store::Error) -> Error {
    use crate::error::{StorageError, StorageErrorKind};
    let message = format!("{url}: {}", describe(&e));
    let kind = match &e {
        object_store::Error::Generic { .. } => StorageErrorKind::OutcomeUnknown,
        _ => StorageErrorKind::Other,
    };
    Error::Storage { context, source: StorageError::new(kind, message, None) }
}

/// One object opened for a streamed read: ranged GETs of [`READ_CHUNK_BYTES`] with the ETag
/// seen at the open pinned (`If-Match`), so what is read is one version of the object. The last
/// [`WINDOWS_KEPT`] windows are kept and serve the reads that fall inside them.
///
/// For Parquet it is also a `ChunkReader`: the parquet crate turns a failed read into its own
/// error, so every failure is kept in its [`FaultCell`] too, and the caller reports it as an
/// I/O error rather than as a malformed file.
pub(crate) struct ObjectFile {
    root: Arc<ObjectRoot>,
    key: ObjectPath,
    url: String,
    size: u64,
    e_tag: Option<String>,
    pos: u64,
    chunk: Bytes,
    windows: Windows,
    fault: FaultCell,
}

/// The windows of an object fetched last (`(start, bytes)`, most recent first), shared by an
/// [`ObjectFile`] and the readers cloned from it; each was read with the object's ETag pinned.
#[derive(Debug, Clone, Default)]
struct Windows(Arc<Mutex<Vec<(u64, Bytes)>>>);

impl Windows {
    /// Bytes `start..end` if one window holds them all.
    fn get(&self, start: u64, end: u64) -> Option<Bytes> {
        let windows = self.0.lock().ok()?;
        windows.iter().find_map(|(at, bytes)| {
            let window_end = at + bytes.len() as u64;
            (*at <= start && end <= window_end).then(|| bytes.slice((start - at) as usize..(end - at) as usize))
        })
    }

    /// Bytes from `start` to the end of the window that holds `start`, if one does.
    fn rest_from(&self, start: u64) -> Option<Bytes> {
        let windows = self.0.lock().ok()?;
        windows.iter().find_map(|(at, bytes)| {
            let window_end = at + bytes.len() as u64;
            (*at <= start && start < window_end).then(|| bytes.slice((start - at) as usize..))
        })
    }

    fn keep(&self, start: u64, bytes: Bytes) {
        if let Ok(mut windows) = self.0.lock() {
            windows.insert(0, (start, bytes));
            windows.truncate(WINDOWS_KEPT);
        }
    }
}

/// The first read failure of an [`ObjectFile`] and of the readers cloned from it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultCell(Arc<Mutex<Option<String>>>);

impl FaultCell {
    /// The failure recorded, if any.
    pub(crate) fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|f| f.clone())
    }

    fn record(&self, message: String) {
        if let Ok(mut fault) = self.0.lock() {
            fault.get_or_insert(message);
        }
    }
}

impl ObjectFile {
    /// The object's size when it was opened.
    pub(crate) fn len(&self) -> u64 {
        self.size
    }

    /// Where the first read failure of this object or of a reader cloned from it is kept.
    pub(crate) fn fault_cell(&self) -> FaultCell {
        self.fault.clone()
    }

    fn reader_at(&self, pos: u64) -> ObjectFile {
        ObjectFile {
            root: Arc::clone(&self.root),
            key: self.key.clone(),
            url: self.url.clone(),
            size: self.size,
            e_tag: self.e_tag.clone(),
            pos,
            chunk: Bytes::new(),
            windows: self.windows.clone(),
            fault: self.fault.clone(),
        }
    }

    /// Bytes `start..start + len` of the object (the ETag pinned).
    fn range(&self, start: u64, len: u64) -> io::Result<Bytes> {
        let end = start.saturating_add(len).min(self.size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let options = GetOptions {
            if_match: self.e_tag.as_ref().map(|tag| format!("\"{tag}\"")),
            range: Some(GetRange::Bounded(start..end)),
            ..GetOptions::default()
        };
        let fetched = self.root.block_on(async {
            let got = self.root.store.get_opts(&self.key, options).await?;
            got.bytes().await
        });
        let result = match fetched {
            Ok(bytes) if bytes.len() as u64 == end - start => Ok(bytes),
            Ok(bytes) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: asked for {} bytes at {start}, got {} (it was cut short while read)", self.url, end - start, bytes.len()),
            )),
            Err(e) => Err(read_error(&self.url, e)),
        };
        if let Err(e) = &result {
            self.fault.record(e.to_string());
        }
        result
    }
}

impl ObjectFile {
    /// Bytes from `start` on, at least one: the rest of a window already fetched, or a new
    /// window of [`READ_CHUNK_BYTES`] (kept for the next reads).
    fn window_from(&self, start: u64) -> io::Result<Bytes> {
        if let Some(bytes) = self.windows.rest_from(start) {
            return Ok(bytes);
        }
        let bytes = self.range(start, READ_CHUNK_BYTES)?;
        if !bytes.is_empty() {
            self.windows.keep(start, bytes.clone());
        }
        Ok(bytes)
    }

    /// Bytes `start..start + len`: from a window if one holds them; through a new window if they
    /// fit in one; else read exactly (a large column chunk, not kept).
    fn bytes_at(&self, start: u64, len: u64) -> io::Result<Bytes> {
        let end = start.saturating_add(len).min(self.size);
        if let Some(bytes) = self.windows.get(start, end) {
            return Ok(bytes);
        }
        if len <= READ_CHUNK_BYTES {
            // A new window from `start` (a kept one that holds `start` ends too soon).
            let window = self.range(start, READ_CHUNK_BYTES)?;
            if !window.is_empty() {
                self.windows.keep(start, window.clone());
            }
            let wanted = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX).min(window.len());
            return Ok(window.slice(..wanted));
        }
        self.range(start, len)
    }
}

impl Read for ObjectFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.chunk.is_empty() {
            if self.pos >= self.size {
                return Ok(0);
            }
            self.chunk = self.window_from(self.pos)?;
            self.pos += self.chunk.len() as u64;
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::Length for ObjectFile {
    fn len(&self) -> u64 {
        self.size
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::ChunkReader for ObjectFile {
    type T = ObjectFile;

    fn get_read(&self, start: u64) -> parquet::errors::Result<ObjectFile> {
        Ok(self.reader_at(start))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let bytes = self.bytes_at(start, length as u64).map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
        if bytes.len() != length {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "expected {length} bytes at {start}, the object holds {}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn urls_name_a_bucket_and_a_clean_prefix() {
        assert_eq!(parse_url("s3://b").unwrap(), ("b".to_owned(), String::new()));
        assert_eq!(parse_url("s3://b/p/q/").unwrap(), ("b".to_owned(), "p/q".to_owned()));
        for bad in ["s3://", "s3:///p", "s3://b/p//q", "s3://b/../q", "s3://key:secret@b/p", "s3://b/p?x=1", "file:///tmp"] {
            assert!(parse_url(bad).is_err(), "{bad} accepted");
        }
    }
}
