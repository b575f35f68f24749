//! Batching: queued requests that can share a batch run as one execution,
//! each getting exactly its own rows; requests that differ (shapes,
//! parameters) do not share; a failing batch fails each of its requests; a
//! preferred size goes at once and a lone request after the delay; the
//! adaptive batcher grows its size while batches stay within the
//! objective.

use std::sync::Arc;
use std::time::Duration;

use wirespeed_core::{ErrorKind, Execution, ParameterValue};
use wirespeed_scheduler::{Adaptive, Batching, CallContext, Scheduling};

use crate::support::{events, outcome, scheduler, send, wait_queued, with_parameters, Gate, Gated};

fn batching(max: usize, preferred: Vec<usize>, delay: Duration) -> Scheduling {
    Scheduling {
        batching: Some(Batching {
            max_batch_size: max,
            preferred_batch_sizes: preferred,
            max_queue_delay: delay,
            adaptive: None,
        }),
        ..Scheduling::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_run_as_one_batch_and_each_gets_its_own_rows() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("rows", 1, Execution::Pool, &gate);
    let scheduler = scheduler(model, 1, 64, batching(8, vec![], Duration::ZERO));
    let first = send(&scheduler, &[1], &[0.5], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let sizes = [1, 2, 1, 3, 1];
    let sent: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let x: Vec<f32> = (0..n).map(|i| (10 * (k + 1) + i) as f32).collect();
            let task = send(&scheduler, &[n], &x, CallContext::now());
            (x, task)
        })
        .collect();
    wait_queued("rows", sizes.len());
    gate.release(2);
    for (x, task) in sent {
        let (answer, spent) = outcome(task).await;
        assert_eq!(
            answer.unwrap().0,
            x,
            "each request gets exactly its own rows"
        );
        assert_eq!(spent.batch, 8);
        assert!(spent.compute > Duration::ZERO);
    }
    let (answer, spent) = outcome(first).await;
    assert_eq!((answer.unwrap().0, spent.batch), (vec![0.5], 1));
    assert_eq!(gate.read(|s| s.started), 2, "one execution for the five");
    assert_eq!(gate.read(|s| s.computed[1].len()), 8);
    let counters = scheduler.counters();
    let executions = counters
        .executions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(executions, 2);
    let batches = counters.batches.lock().unwrap();
    assert_eq!(batches.keys().copied().collect::<Vec<_>>(), [1, 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_differ_are_not_batched_together() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("shapes", 2, Execution::Pool, &gate);
    let scheduler = scheduler(model, 2, 64, batching(8, vec![], Duration::ZERO));
    let first = send(&scheduler, &[1, 1], &[0.5], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let second = send(&scheduler, &[1, 1], &[0.25], CallContext::now());
    gate.wait_until("the second compute", |s| s.started == 2);
    // Two of [1, 2], one of [1, 3], and one of [1, 2] with another
    // parameter: three batches.
    let tenant = vec![("tenant".to_owned(), ParameterValue::String("b".into()))];
    let requests = [
        (vec![1, 2], vec![1.0, 2.0], CallContext::now()),
        (vec![1, 3], vec![3.0, 4.0, 5.0], CallContext::now()),
        (vec![1, 2], vec![6.0, 7.0], CallContext::now()),
        (vec![1, 2], vec![8.0, 9.0], with_parameters(tenant)),
    ];
    let sent: Vec<_> = requests
        .into_iter()
        .map(|(shape, x, context)| {
            let task = send(&scheduler, &shape, &x, context);
            (x, task)
        })
        .collect();
    wait_queued("shapes", 4);
    gate.release(5);
    let mut rows = Vec::new();
    for (x, task) in sent {
        let (answer, spent) = outcome(task).await;
        assert_eq!(answer.unwrap().0, x);
        rows.push(spent.batch);
    }
    assert_eq!(rows, [2, 1, 2, 1]);
    assert!(outcome(first).await.0.is_ok());
    assert!(outcome(second).await.0.is_ok());
    assert_eq!(gate.read(|s| s.started), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_fails_each_request_with_the_models_error() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("failing", 1, Execution::Pool, &gate).failing("the model refused");
    let scheduler = scheduler(model, 1, 64, batching(8, vec![], Duration::ZERO));
    let first = send(&scheduler, &[1], &[0.5], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let sent: Vec<_> = (0..3)
        .map(|k| send(&scheduler, &[1], &[k as f32], CallContext::now()))
        .collect();
    wait_queued("failing", 3);
    gate.release(2);
    for task in sent.into_iter().chain([first]) {
        let error = outcome(task).await.0.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadGateway);
        assert!(error.message().contains("the model refused"), "{error}");
    }
    assert_eq!(gate.read(|s| s.started), 2, "the three failed in one batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_size_goes_at_once_and_a_lone_request_after_the_delay() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("preferred", 1, Execution::Pool, &gate);
    let forever = Duration::from_secs(60);
    let preferred = scheduler(model, 1, 64, batching(8, vec![4], forever));
    // With a delay configured, even the first request waits for company.
    let three: Vec<_> = (0..3)
        .map(|k| send(&preferred, &[1], &[k as f32], CallContext::now()))
        .collect();
    wait_queued("preferred", 3);
    assert_eq!(gate.read(|s| s.started), 0, "three rows wait for a fourth");
    let fourth = send(&preferred, &[1], &[3.0], CallContext::now());
    gate.wait_until("the batch of four", |s| s.started == 1);
    gate.release(1);
    for task in three.into_iter().chain([fourth]) {
        assert_eq!(outcome(task).await.1.batch, 4);
    }

    let gate = Arc::new(Gate::default());
    let model = Gated::new("delayed", 1, Execution::Pool, &gate);
    let delay = Duration::from_millis(200);
    let delayed = scheduler(model, 1, 64, batching(8, vec![], delay));
    let lone = send(&delayed, &[1], &[9.0], CallContext::now());
    gate.wait_until("the lone compute", |s| s.started == 1);
    gate.release(1);
    let (answer, spent) = outcome(lone).await;
    assert_eq!((answer.unwrap().0, spent.batch), (vec![9.0], 1));
    assert!(
        spent.queue >= delay,
        "it waited the delay for company: {spent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adaptive_batcher_grows_while_batches_stay_within_the_objective() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("adaptive", 1, Execution::Pool, &gate);
    let scheduling = Scheduling {
        batching: Some(Batching {
            max_batch_size: 64,
            preferred_batch_sizes: vec![],
            max_queue_delay: Duration::ZERO,
            adaptive: Some(Adaptive {
                objective: Duration::from_secs(60),
                step: 2,
                backoff: 0.5,
            }),
        }),
        ..Scheduling::default()
    };
    let scheduler = scheduler(model, 1, 64, scheduling);
    let size = || {
        let counters = scheduler.counters();
        counters
            .batch_size
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(size(), 1, "an adaptive batcher starts at one row");
    // One computing alone; three queued behind it. The first batch formed
    // is one row, the size then: full and within the objective, so the
    // size grows by its step; the two left make no full batch after that
    // (one batch of two, or two of one if a slot comes back before the
    // size is known).
    let lead = send(&scheduler, &[1], &[0.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let queued: Vec<_> = (1..=3)
        .map(|k| send(&scheduler, &[1], &[k as f32], CallContext::now()))
        .collect();
    wait_queued("adaptive", 3);
    gate.release(4);
    assert_eq!(outcome(lead).await.0.unwrap().0, [0.0]);
    let mut rows = Vec::new();
    for (k, task) in queued.into_iter().enumerate() {
        let (answer, spent) = outcome(task).await;
        assert_eq!(answer.unwrap().0, [(k + 1) as f32]);
        rows.push(spent.batch);
    }
    rows.sort_unstable();
    assert!(rows == [1, 2, 2] || rows == [1, 1, 1], "{rows:?}");
    events().wait_for(&["adaptive batch size", "model=adaptive ", "from=1 ", "to=3 "]);
    assert_eq!(size(), 3);
}
