//! Admission and slots: a full queue refuses at once; a slot is held until
//! the model's compute really ends, whether or not its caller is still
//! there; an async compute is cancelled when its caller leaves, and its
//! slot comes back then; a queued request whose caller leaves is never
//! computed; a client's deadline reaches a model that awaits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wirespeed_core::{ErrorKind, Execution};
use wirespeed_scheduler::{CallContext, Scheduling};

use crate::support::{events, outcome, scheduler, send, wait_queued, Gate, Gated};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_at_once_and_a_freed_slot_serves_the_next() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("shed", 1, Execution::Pool, &gate);
    let scheduler = scheduler(model, 1, 1, Scheduling::default());
    let first = send(&scheduler, &[1], &[1.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let second = send(&scheduler, &[1], &[2.0], CallContext::now());
    wait_queued("shed", 1);
    assert_eq!(scheduler.waiting(), 1);

    let (refused, spent) = outcome(send(&scheduler, &[1], &[3.0], CallContext::now())).await;
    let error = refused.expect_err("no room: one computing, one waiting");
    assert_eq!(error.kind(), ErrorKind::Overloaded);
    assert!(error.message().contains("is busy"), "{error}");
    assert_eq!(spent.compute, Duration::ZERO, "never computed");

    gate.release(2);
    assert_eq!(outcome(first).await.0.unwrap().0, [1.0]);
    assert_eq!(outcome(second).await.0.unwrap().0, [2.0]);
    assert_eq!(gate.read(|s| (s.started, s.most_running)), (2, 1));
    assert_eq!(scheduler.waiting(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_that_do_not_fit_the_model_are_refused_before_any_slot() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("misfit", 1, Execution::Pool, &gate);
    let scheduler = scheduler(model, 1, 0, Scheduling::default());
    let (answer, _) = outcome(send(&scheduler, &[1, 1], &[1.0], CallContext::now())).await;
    let error = answer.expect_err("rank 2 for a rank-1 model");
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    assert_eq!(gate.read(|s| s.started), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_mid_compute_keeps_a_pool_slot_until_the_compute_ends() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("left_pool", 1, Execution::Pool, &gate);
    let scheduler = scheduler(model, 1, 0, Scheduling::default());
    let first = send(&scheduler, &[1], &[1.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());

    let (busy, _) = outcome(send(&scheduler, &[1], &[2.0], CallContext::now())).await;
    assert_eq!(
        busy.unwrap_err().kind(),
        ErrorKind::Overloaded,
        "the slot is held"
    );
    assert_eq!(gate.read(|s| s.finished), 0, "still computing");

    gate.release(1);
    events().wait_for(&["compute ended", "model=left_pool "]);
    gate.release(1);
    let (third, spent) = outcome(send(&scheduler, &[1], &[3.0], CallContext::now())).await;
    assert_eq!(third.unwrap().0, [3.0]);
    assert_eq!(spent.batch, 0, "the model does not batch");
    assert_eq!(gate.read(|s| (s.started, s.most_running)), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_cancels_an_async_compute_and_frees_its_slot() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("left_async", 1, Execution::Async, &gate);
    let scheduler = scheduler(model, 1, 0, Scheduling::default());
    let first = send(&scheduler, &[1], &[1.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    first.abort();
    gate.wait_until("the cancellation", |s| s.cancelled == 1);

    gate.release(1);
    let (second, _) = outcome(send(&scheduler, &[1], &[2.0], CallContext::now())).await;
    assert_eq!(
        second.unwrap().0,
        [2.0],
        "the slot came back with the cancel"
    );
    assert_eq!(
        gate.read(|s| (s.started, s.finished, s.cancelled)),
        (2, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_caller_leaves_is_never_computed() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("left_queue", 1, Execution::Pool, &gate);
    let scheduler = scheduler(model, 1, 4, Scheduling::default());
    let first = send(&scheduler, &[1], &[1.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let second = send(&scheduler, &[1], &[2.0], CallContext::now());
    wait_queued("left_queue", 1);
    second.abort();
    events().wait_for(&["the caller left while queued", "model=left_queue "]);

    gate.release(1);
    assert_eq!(outcome(first).await.0.unwrap().0, [1.0]);
    events().wait_for(&["dropped without computing", "model=left_queue "]);
    gate.release(1);
    let (third, _) = outcome(send(&scheduler, &[1], &[3.0], CallContext::now())).await;
    assert_eq!(third.unwrap().0, [3.0]);
    assert_eq!(
        gate.read(|s| s.computed.clone()),
        [vec![1.0], vec![3.0]],
        "the second request never computed"
    );
    assert_eq!(scheduler.waiting(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_passes_in_the_queue_drops_the_request_uncomputed() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("deadline", 1, Execution::Async, &gate);
    let scheduler = scheduler(model, 1, 4, Scheduling::default());
    let first = send(&scheduler, &[1], &[1.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    // The caller's own deadline (a gRPC client's): it stops waiting.
    let waiting = Arc::clone(&scheduler);
    let second = tokio::spawn(async move {
        let mut spent = wirespeed_scheduler::Spent::default();
        let context = CallContext {
            deadline: Some(Instant::now() + Duration::from_millis(50)),
            ..CallContext::now()
        };
        let inputs = vec![crate::support::input(&[1], &[2.0])];
        tokio::time::timeout(
            Duration::from_millis(50),
            waiting.run(inputs, &[], context, &mut spent),
        )
        .await
    });
    assert!(second.await.unwrap().is_err(), "the deadline passed first");
    events().wait_for(&["the caller left while queued", "model=deadline "]);
    gate.release(2);
    assert_eq!(outcome(first).await.0.unwrap().0, [1.0]);
    let (third, _) = outcome(send(&scheduler, &[1], &[3.0], CallContext::now())).await;
    assert_eq!(third.unwrap().0, [3.0]);
    assert_eq!(gate.read(|s| s.started), 2, "the second never computed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_panics_fails_its_request_whichever_thread_computes_it() {
    for execution in [Execution::Inline, Execution::Pool] {
        let gate = Arc::new(Gate::default());
        let model = Gated::new("panics", 1, execution, &gate).panicking();
        let scheduler = scheduler(model, 1, 0, Scheduling::default());
        gate.release(2);
        for value in [1.0, 2.0] {
            let (answer, _) = outcome(send(&scheduler, &[1], &[value], CallContext::now())).await;
            let error = answer.expect_err("the model panicked");
            assert_eq!(error.kind(), ErrorKind::Internal, "{execution:?}: {error}");
            assert!(error.message().contains("panicked"), "{error}");
        }
        // The slot came back each time: the second request computed too.
        assert_eq!(gate.read(|s| s.started), 2, "{execution:?}");
    }
}
