//! HTTP/2 connections to one replica, pooled per thread.
//!
//! Each I/O thread of the server runs its own single-threaded runtime, and
//! a request's call runs there. So each thread keeps its own connections to
//! each replica: a call and its connection's task share a thread, and no
//! answer crosses threads. A thread opens a connection when it has none
//! open, or when every one it has carries a call and it holds fewer than
//! `connections` (so a large request in flight does not hold small ones
//! behind it on one connection); a call takes the connection with the
//! fewest calls. Closed connections (the upstream went away, a keep-alive
//! ping went unanswered) are dropped when next looked at.
//!
//! hyper's HTTP/2 client runs each connection; its keep-alive pings find
//! connections that died without a word.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_rustls::TlsConnector;

use crate::address::Address;
use crate::body::CallBody;
use crate::connect::connect;
use crate::error::CallError;

/// How connections to upstreams are made and kept.
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// Time to open a connection (and finish TLS).
    pub connect_timeout: Duration,
    /// Connections each thread may keep to one replica.
    pub connections: usize,
    /// How often an idle connection is pinged.
    pub keep_alive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    pub keep_alive_timeout: Duration,
}

impl Default for ChannelOptions {
    fn default() -> ChannelOptions {
        ChannelOptions {
            connect_timeout: Duration::from_secs(5),
            connections: 4,
            keep_alive_interval: Duration::from_secs(20),
            keep_alive_timeout: Duration::from_secs(10),
        }
    }
}

/// One open HTTP/2 connection and the calls it carries.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) sender: http2::SendRequest<CallBody>,
    calls: Arc<AtomicUsize>,
}

/// A call's hold on its connection; the count drops with it.
pub(crate) struct Held {
    pub(crate) connection: Connection,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.connection.calls.fetch_sub(1, Ordering::Relaxed);
    }
}

thread_local! {
    /// This thread's connections, by replica.
    static POOLS: RefCell<HashMap<u64, Vec<Connection>>> = RefCell::new(HashMap::new());
}

/// Numbers replicas, for the pools' keys.
static REPLICA_IDS: AtomicU64 = AtomicU64::new(1);

/// The HTTP/2 connections of one replica.
pub(crate) struct Channel {
    id: u64,
    address: Address,
    /// `scheme://authority`, which every call's URI starts with.
    origin: String,
    tls: Option<TlsConnector>,
    options: ChannelOptions,
}

impl Drop for Channel {
    fn drop(&mut self) {
        let id = self.id;
        let _ = POOLS.try_with(|pools| pools.borrow_mut().remove(&id));
    }
}

impl Channel {
    pub(crate) fn new(
        address: Address,
        tls: Option<TlsConnector>,
        options: ChannelOptions,
    ) -> Channel {
        Channel {
            id: REPLICA_IDS.fetch_add(1, Ordering::Relaxed),
            origin: format!("{}://{}", address.scheme(), address.authority()),
            address,
            tls,
            options,
        }
    }

    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    /// The URI of a call of `path` (`/package.Service/Method`).
    pub(crate) fn uri(&self, path: &str) -> String {
        let mut uri = String::with_capacity(self.origin.len() + path.len());
        uri.push_str(&self.origin);
        uri.push_str(path);
        uri
    }

    /// A connection for one call: this thread's least busy open one, or a
    /// new one when none is free and there is room for it.
    pub(crate) async fn connection(&self) -> Result<Held, CallError> {
        let max = self.options.connections.max(1);
        let picked = POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            let pool = pools.entry(self.id).or_default();
            pool.retain(|c| !c.sender.is_closed());
            let least = pool
                .iter()
                .min_by_key(|c| c.calls.load(Ordering::Relaxed))
                .cloned();
            match least {
                Some(c) if c.calls.load(Ordering::Relaxed) == 0 || pool.len() >= max => Some(c),
                _ => None,
            }
        });
        let connection = match picked {
            Some(connection) => connection,
            None => {
                let connection = self.open().await?;
                POOLS.with(|pools| {
                    let mut pools = pools.borrow_mut();
                    let pool = pools.entry(self.id).or_default();
                    if pool.len() < max {
                        pool.push(connection.clone());
                    }
                });
                connection
            }
        };
        connection.calls.fetch_add(1, Ordering::Relaxed);
        Ok(Held { connection })
    }

    /// Opens a connection and starts its task on this thread's runtime.
    async fn open(&self) -> Result<Connection, CallError> {
        let stream = connect(
            &self.address,
            self.tls.as_ref(),
            self.options.connect_timeout,
        )
        .await
        .map_err(|e| CallError::Unreached(e.to_string()))?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(8 << 20)
            .max_frame_size(512 << 10)
            .keep_alive_interval(self.options.keep_alive_interval)
            .keep_alive_timeout(self.options.keep_alive_timeout)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| CallError::Unreached(format!("the HTTP/2 handshake failed: {e}")))?;
        let address = self.address.to_string();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(upstream = %address, error = %e, "upstream connection closed");
            }
        });
        tracing::debug!(upstream = %self.address, "opened an upstream connection");
        Ok(Connection {
            sender,
            calls: Arc::new(AtomicUsize::new(0)),
        })
    }
}
