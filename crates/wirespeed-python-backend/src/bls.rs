//! Triton's BLS from a Python model: `pb_utils.InferenceRequest(model_name=,
//! inputs=, requested_output_names=).exec()` in a model's `execute`. The
//! worker sends the call on its socket while its own request computes
//! (`wire::Reply::Bls`), the tensors' raw bytes in its call segment (or,
//! for a decoupled model's calls, which run at once, in the frame's
//! payload), up to [`pool_limit`](super::wire::pool_limit); its keeper runs it
//! through the server's [`ModelCaller`](wirespeed_backend::ModelCaller) (the callee's
//! scheduler, statistics and limits, this request's deadline) and answers
//! with the callee's outputs or its error, which the model sees as an
//! `InferenceResponse` with `has_error()`, as in Triton.

use std::time::Instant;

use bytes::Bytes;
use wirespeed_backend::{CallContext, Caller, CallerGone, Run};
use wirespeed_core::raw::{from_raw, into_raw};
use wirespeed_core::{element_count, DataType, Error, ErrorKind, RequestedOutput, Tensor};

use super::process::Launch;
use super::segment::{aligned, CallSegment};
use super::wire::{placed, pool_limit, BlsAnswer, BlsCall};

/// The largest tensor element a BLS input may hold (a BYTES element).
const MAX_ELEMENT: usize = 1 << 30;

/// Where a call's tensors (and a load's files) lie: the frame's payload,
/// or the worker's call segment (a call says which).
pub(crate) enum Carried<'a> {
    /// The frame's payload, owned: it goes once the tensors are made.
    Frame(Vec<u8>),
    /// The worker's call segment, as it is now.
    Segment(&'a [u8]),
}

impl Carried<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Carried::Frame(payload) => payload,
            Carried::Segment(contents) => contents,
        }
    }
}

/// Runs one BLS call through the worker's call segment when the call says
/// its tensors lie there (a model that makes one call at a time), else as
/// [`call`] does with the frame's `payload`. The answer's tensors then go
/// into the segment too: over the call's (which are tensors of their own
/// by then) when they fit the room the worker gave, else past the earlier
/// answers its model still holds. The worker's model reads them there, in
/// place, until it drops them.
pub(crate) fn call_through(
    launch: &Launch,
    call: BlsCall,
    payload: Vec<u8>,
    segment: &mut CallSegment,
    deadline: Option<Instant>,
    gone: CallerGone<'_>,
) -> (BlsAnswer, Payload) {
    if !call.segment {
        return self::call(launch, call, Carried::Frame(payload), deadline, gone);
    }
    let model = call.model.clone();
    let (at, room, held) = (call.at, call.room, call.held);
    // How far the worker wrote: the segment's pages past what a call uses
    // are given back, the worker's writes counted with the server's.
    let mut written = call
        .inputs
        .iter()
        .map(|input| input.3.saturating_add(input.4))
        .chain(call.files.values().map(|&(at, len)| at.saturating_add(len)))
        .max()
        .unwrap_or(0);
    let (mut answer, out) = match segment.reserve(0) {
        Ok(contents) => {
            // The worker's word, held to what the segment holds.
            if at.max(held) > contents.len() {
                let error = Error::invalid_input(format!(
                    "a call at {at}, past answers held to {held}, in a call segment of {} bytes",
                    contents.len()
                ));
                return failed(launch, &model, error);
            }
            let contents = &contents[at..];
            written = at + written.min(contents.len());
            self::call(launch, call, Carried::Segment(contents), deadline, gone)
        }
        Err(e) => return failed(launch, &model, segment_error(e)),
    };
    // Over the call's tensors when the answer fits the room there, else
    // past what the worker's model still holds.
    let answer_at = if room.is_none_or(|room| out.size <= room) {
        at
    } else {
        aligned(held)
    };
    let end = answer_at.saturating_add(out.size);
    if out.size > 0 {
        match segment.reserve(end) {
            Ok(contents) => {
                let mut from = answer_at;
                for part in &out.parts {
                    contents[from..from + part.len()].copy_from_slice(part);
                    from += part.len();
                }
            }
            Err(e) => return failed(launch, &model, segment_error(e)),
        }
    }
    segment.settle(written.max(end).max(held));
    answer.segment = true;
    answer.at = answer_at;
    (answer, Payload::default())
}

/// The answer of a call that failed before it ran.
fn failed(launch: &Launch, model: &str, error: Error) -> (BlsAnswer, Payload) {
    let mut out = Payload::default();
    (answer(launch, model, Err(error), &mut out), out)
}

fn segment_error(e: std::io::Error) -> Error {
    Error::internal(format!("the worker's call segment: {e}"))
}

/// Runs one BLS call of the model `launch` runs, its tensors in `carried`,
/// before `deadline` (the calling request's) and the call's own timeout;
/// with `decoupled`, every response of the callee's stream
/// (`exec(decoupled=True)`). Or answers whether the model is ready
/// (`is_model_ready`). The answer, and its payload: the outputs' bytes.
pub(crate) fn call(
    launch: &Launch,
    call: BlsCall,
    carried: Carried<'_>,
    deadline: Option<Instant>,
    mut gone: CallerGone<'_>,
) -> (BlsAnswer, Payload) {
    if call.segment && matches!(carried, Carried::Frame(_)) {
        // A decoupled model's calls run at once, so they have no segment.
        let error = Error::invalid_input(
            "a call whose tensors lie in the call segment, from a model whose calls carry them",
        );
        return failed(launch, &call.model, error);
    }
    let BlsCall {
        model,
        version,
        inputs,
        outputs,
        parameters,
        decoupled,
        timeout_us,
        ready_only,
        control,
        config,
        files,
        call: _,
        segment: _,
        at: _,
        room: _,
        held: _,
    } = call;
    let (model, version) = (model.as_str(), version.as_deref());
    let mut out = Payload::default();
    if let Some(control) = control {
        let result = model_control(launch, model, &control, config, files, carried.bytes());
        return (
            answer(launch, model, result.map(|()| Vec::new()), &mut out),
            out,
        );
    }
    if ready_only {
        let ready = launch
            .caller
            .get()
            .is_some_and(|server| server.caller.callee(model, version).is_ok());
        let mut answer = answer(launch, model, Ok(Vec::new()), &mut out);
        answer.ready = Some(ready);
        return (answer, out);
    }
    let deadline = match (deadline, timeout_us) {
        (deadline, 0) => deadline,
        (deadline, us) => {
            let own = std::time::Instant::now() + std::time::Duration::from_micros(us);
            Some(deadline.map_or(own, |d| d.min(own)))
        }
    };
    let mut responses = Vec::new();
    let result = (|| {
        let server = launch.caller.get().ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                "calling another model needs the server (BLS is not available here)",
            )
        })?;
        let tensors = inputs
            .into_iter()
            .map(|(name, datatype, shape, offset, len)| {
                let bytes = placed(carried.bytes(), offset, len).ok_or_else(|| {
                    Error::invalid_input(format!(
                        "BLS input '{name}': its bytes ({offset}+{len}) lie past the call's {}",
                        carried.bytes().len()
                    ))
                })?;
                tensor(name, &datatype, shape, bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The tensors hold their bytes now: the payload goes before the
        // callee runs (a gigabyte's tensor is not held twice meanwhile).
        drop(carried);
        let outputs: Vec<RequestedOutput> = outputs
            .into_iter()
            .map(|name| RequestedOutput {
                name,
                parameters: Vec::new(),
            })
            .collect();
        let mut context = CallContext {
            parameters: super::wire::parameters(&parameters),
            deadline,
            ..CallContext::now()
        };
        let caller = server.caller.as_ref();
        if !decoupled {
            let run = caller.call(model, version, tensors, &outputs, context);
            return blocking(&server, model, deadline, gone.as_mut(), run);
        }
        // `exec(decoupled=True)`: every response of the callee's stream,
        // each with whether the model flagged it final; a callee that is
        // not decoupled answers once, flagged final.
        if !caller.callee(model, version)?.decoupled() {
            let run = caller.call(model, version, tensors, &outputs, context);
            let response = blocking(&server, model, deadline, gone.as_mut(), run);
            let mut one = answer(launch, model, response, &mut out);
            one.last = Some(true);
            responses.push(one);
            return Ok(Vec::new());
        }
        let (sender, mut receiver) = wirespeed_core::response_channel();
        context.responses = Some(sender);
        // The callee's run and its responses overlap, as for a client's
        // stream; each response is handed on as it comes.
        let run = caller.call(model, version, tensors, &outputs, context);
        let streamed = Box::pin(async {
            let mut run = run;
            let mut running = true;
            loop {
                tokio::select! {
                    ran = &mut run, if running => {
                        running = false;
                        ran?;
                    }
                    item = receiver.next() => match item {
                        Some(streamed) => {
                            let mut one = answer(launch, model, streamed.result, &mut out);
                            one.last = Some(streamed.last);
                            responses.push(one);
                        }
                        None => break,
                    },
                }
            }
            if running {
                run.await?;
            }
            Ok(Vec::new())
        });
        blocking(&server, model, deadline, gone.as_mut(), streamed)
    })();
    let mut answer = answer(launch, model, result, &mut out);
    if decoupled && answer.error.is_none() {
        answer.responses = Some(responses);
    }
    let limit = pool_limit();
    if out.size > limit {
        // The answer's tensors do not fit the pool: the call fails as in
        // Triton, and the worker gets no more than the error.
        let error = Error::new(ErrorKind::LimitExceeded, pool_full(model, out.size, limit));
        out = Payload::default();
        return (self::answer(launch, model, Err(error), &mut out), out);
    }
    (answer, out)
}

/// Runs `run`, a call to `model`, on the keeper's own thread, blocking it
/// until the answer: the server's runtime drives the timers and I/O the
/// call registers with it, with no hand-over to another thread and back.
/// Past `deadline`, or once the calling request's client has gone, the
/// call is dropped, which cancels it in the callee's scheduler.
fn blocking<T>(
    server: &Caller,
    model: &str,
    deadline: Option<Instant>,
    mut gone: CallerGone<'_>,
    run: Run<'_, T>,
) -> Result<T, Error> {
    let _entered = server.runtime.enter();
    let bounded = async move {
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), run)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::new(
                        ErrorKind::GatewayTimeout,
                        format!("calling model '{model}': the request's deadline passed"),
                    ))
                }),
            None => run.await,
        }
    };
    server.runtime.block_on(async move {
        tokio::select! {
            done = bounded => done,
            () = gone.as_mut() => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "calling model '{model}': the calling request's client left; the call is cancelled"
                ),
            )),
        }
    })
}

/// Triton's words for tensors that do not fit its Python backend's
/// shared-memory pool, with the sizes.
fn pool_full(model: &str, size: usize, limit: usize) -> String {
    format!(
        "Failed to increase the shared memory pool size for key '{model}' to {size} bytes: \
         the tensors of one BLS call may take {limit} bytes (half the server's memory)"
    )
}

/// `pb_utils.load_model` and `unload_model`: the repository changed as
/// its API changes it.
fn model_control(
    launch: &Launch,
    model: &str,
    control: &str,
    config: Option<String>,
    files: std::collections::BTreeMap<String, (usize, usize)>,
    payload: &[u8],
) -> Result<(), Error> {
    let server = launch.caller.get().ok_or_else(|| {
        Error::new(
            ErrorKind::Unavailable,
            "loading and unloading models needs the server",
        )
    })?;
    match control {
        "load" => {
            let files = files
                .into_iter()
                .map(|(path, (offset, len))| {
                    let bytes = placed(payload, offset, len).ok_or_else(|| {
                        Error::invalid_input(format!(
                            "load file '{path}': its bytes lie past the call's {}",
                            payload.len()
                        ))
                    })?;
                    Ok((path, bytes.to_vec()))
                })
                .collect::<Result<Vec<_>, Error>>()?;
            let load = server
                .caller
                .load_model(model, config.filter(|c| !c.is_empty()), files);
            server.runtime.block_on(load)
        }
        "unload" => server.runtime.block_on(server.caller.unload_model(model)),
        other => Err(Error::invalid_input(format!(
            "unknown model control '{other}': load or unload"
        ))),
    }
}

/// The bytes of an answer's tensors, each from its own buffer (no copy
/// for the fixed-size types), sent after it as the frame's payload.
#[derive(Default)]
pub(crate) struct Payload {
    pub(crate) parts: Vec<Bytes>,
    pub(crate) size: usize,
}

/// One answer of a call: its outputs, their bytes added to the end of
/// `out`, or its error.
fn answer(
    launch: &Launch,
    model: &str,
    result: Result<Vec<Tensor>, Error>,
    out: &mut Payload,
) -> BlsAnswer {
    match result {
        Ok(tensors) => BlsAnswer {
            op: "bls_result",
            outputs: tensors
                .into_iter()
                .map(|t| {
                    let datatype = t.data.datatype().as_str();
                    let raw = into_raw(t.data);
                    let (offset, len) = (out.size, raw.len());
                    out.size += len;
                    out.parts.push(raw);
                    (t.name, datatype, t.shape, offset, len)
                })
                .collect(),
            error: None,
            code: 0,
            responses: None,
            ready: None,
            call: None,
            last: None,
            segment: false,
            at: 0,
        },
        Err(e) => {
            tracing::debug!(model = %launch.model, callee = model, error = %e.message(), "a BLS call failed");
            BlsAnswer {
                op: "bls_result",
                outputs: Vec::new(),
                error: Some(e.public_message().to_owned()),
                code: triton_code(e.kind()),
                responses: None,
                ready: None,
                call: None,
                last: None,
                segment: false,
                at: 0,
            }
        }
    }
}

/// A BLS input as a tensor.
fn tensor(name: String, datatype: &str, shape: Vec<usize>, bytes: &[u8]) -> Result<Tensor, Error> {
    let datatype: DataType = datatype
        .parse()
        .map_err(|e| Error::invalid_input(format!("BLS input '{name}': {e}")))?;
    let count = element_count(&shape)
        .ok_or_else(|| Error::invalid_input(format!("BLS input '{name}': its shape overflows")))?;
    let data = from_raw(datatype, count, bytes, MAX_ELEMENT)
        .map_err(|e| Error::invalid_input(format!("BLS input '{name}': {e}")))?;
    Ok(Tensor {
        name,
        shape,
        data,
        parameters: Vec::new(),
    })
}

/// Triton's `TritonError` code for an error of `kind`.
fn triton_code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::MalformedRequest
        | ErrorKind::InvalidInput
        | ErrorKind::LimitExceeded
        | ErrorKind::PayloadTooLarge
        | ErrorKind::Unsupported => 3,
        ErrorKind::ModelNotFound | ErrorKind::VersionNotFound => 2,
        ErrorKind::Unavailable | ErrorKind::Overloaded => 4,
        ErrorKind::NotImplemented => 5,
        _ => 1,
    }
}
