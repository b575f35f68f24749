//! Decoding on the CPU pool: the decoder goes there with the frames that
//! have arrived and comes back when it has fed them, while the I/O thread
//! reads the next ones; frames that pile up meanwhile are joined into spans.

use super::*;

/// Where the decoder runs.
pub(super) enum Decoding {
    Inline(Box<RequestDecoder>),
    Offloaded(Offloaded),
}

/// A decoder that feeds on the CPU pool: it is either here, idle, or on a
/// trip to the pool with a batch of frames, coming back on `trip`.
pub(super) struct Offloaded {
    pub(super) pool: CpuPool,
    pub(super) idle: Option<Box<RequestDecoder>>,
    pub(super) trip: Option<oneshot::Receiver<Trip>>,
    /// Frames read while the decoder was away.
    pub(super) backlog: Vec<Bytes>,
    /// The first error, which ends the decoding.
    pub(super) failed: Option<DecodeError>,
}

/// A decoder back from the pool, with what feeding took.
pub(super) struct Trip {
    pub(super) decoder: Box<RequestDecoder>,
    pub(super) result: Result<(), DecodeError>,
    pub(super) spent: Duration,
}

impl Offloaded {
    pub(super) fn new(decoder: Box<RequestDecoder>, pool: &CpuPool) -> Offloaded {
        Offloaded {
            pool: pool.clone(),
            idle: Some(decoder),
            trip: None,
            backlog: Vec::new(),
            failed: None,
        }
    }

    /// Sends the decoder to the pool with the backlog, if it is here and
    /// there is something to feed it.
    pub(super) fn depart(&mut self) {
        if self.backlog.is_empty() || self.failed.is_some() {
            return;
        }
        let Some(mut decoder) = self.idle.take() else {
            return;
        };
        let frames = std::mem::take(&mut self.backlog);
        let (back, trip) = oneshot::channel();
        self.trip = Some(trip);
        self.pool.spawn(move || {
            let started = Instant::now();
            let result = feed_frames(&mut decoder, frames);
            let _ = back.send(Trip {
                decoder,
                result,
                spent: started.elapsed(),
            });
        });
    }

    /// Waits for the decoder to come back from its trip. Cancel-safe: the
    /// trip is let go of only once it is back, so this can lose a race in
    /// a `select!` and be called again.
    pub(super) async fn arrive(&mut self, spent: &mut Duration) -> Result<(), Error> {
        let Some(trip) = self.trip.as_mut() else {
            return Ok(());
        };
        let trip = trip.await;
        self.trip = None;
        let trip = trip.map_err(|_| Error::internal("the decoder failed on the CPU pool"))?;
        *spent += trip.spent;
        self.idle = Some(trip.decoder);
        if let Err(e) = trip.result {
            self.failed = Some(e);
        }
        Ok(())
    }
}

/// Feeds `frames` in order: a frame alone, or large enough for the decoder
/// to split over threads by itself, where it lies; small ones joined into
/// spans of up to [`SPAN_BYTES`].
pub(super) fn feed_frames(
    decoder: &mut RequestDecoder,
    frames: Vec<Bytes>,
) -> Result<(), DecodeError> {
    let mut span = Vec::new();
    let mut frames = frames.into_iter().peekable();
    while let Some(frame) = frames.next() {
        if frames.peek().is_none() || frame.len() >= PARALLEL_MIN_BYTES {
            decoder.feed(&frame)?;
            continue;
        }
        span.clear();
        span.extend_from_slice(&frame);
        while span.len() < SPAN_BYTES {
            match frames.next_if(|next| next.len() < PARALLEL_MIN_BYTES) {
                Some(next) => span.extend_from_slice(&next),
                None => break,
            }
        }
        decoder.feed(&span)?;
    }
    Ok(())
}
