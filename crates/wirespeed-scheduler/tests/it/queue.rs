//! Triton's queue policies: higher priority levels go first, arrival order
//! within a level; a request whose queue timeout passes is refused under
//! REJECT and waits behind the others under DELAY; a level's
//! `max_queue_size` refuses at once; a latency objective answers the
//! flagged defaults.

use std::sync::Arc;
use std::time::Duration;

use wirespeed_core::{ErrorKind, Execution, TensorData};
use wirespeed_scheduler::{
    CallContext, DefaultOutput, LevelPolicy, QueuePolicy, Scheduling, Slo, TimeoutAction,
};

use crate::support::{outcome, scheduler, send, wait_queued, Gate, Gated};

fn levels(policy: LevelPolicy, count: usize, default_level: usize) -> Scheduling {
    Scheduling {
        queue: QueuePolicy {
            levels: vec![policy; count],
            default_level,
        },
        ..Scheduling::default()
    }
}

fn priority(priority: u64) -> CallContext {
    CallContext {
        priority,
        ..CallContext::now()
    }
}

fn timeout(timeout: Duration) -> CallContext {
    CallContext {
        timeout: Some(timeout),
        ..CallContext::now()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priorities_and_requests_within_their_timeout_go_first() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("levels", 1, Execution::Async, &gate);
    let scheduler = scheduler(model, 1, 64, levels(LevelPolicy::default(), 2, 1));
    let first = send(&scheduler, &[1], &[0.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    // One at a time into the queue: within a level, arrival is the order.
    let low = send(&scheduler, &[1], &[1.0], priority(2));
    wait_queued("levels", 1);
    let default = send(&scheduler, &[1], &[2.0], CallContext::now());
    wait_queued("levels", 2);
    // Its queue timeout passes at once: under REJECT, refused.
    let impatient = send(&scheduler, &[1], &[3.0], timeout(Duration::from_micros(1)));
    let high = send(&scheduler, &[1], &[4.0], priority(1));
    wait_queued("levels", 4);
    let error = outcome(impatient).await.0.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.message().contains("request timeout expired"),
        "{error}"
    );
    let timeouts = scheduler
        .counters()
        .timeouts
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(timeouts, 1);
    gate.release(4);
    for task in [first, low, default, high] {
        let (answer, spent) = outcome(task).await;
        assert!(answer.is_ok());
        assert_eq!(spent.batch, 0, "the model does not batch");
    }
    let order = gate.read(|s| s.computed.clone());
    assert_eq!(order, [vec![0.0], vec![4.0], vec![1.0], vec![2.0]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_request_waits_behind_those_within_their_timeout() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("delay_action", 1, Execution::Pool, &gate);
    let delay = LevelPolicy {
        timeout_action: TimeoutAction::Delay,
        ..LevelPolicy::default()
    };
    let scheduler = scheduler(model, 1, 64, levels(delay, 1, 0));
    let first = send(&scheduler, &[1], &[0.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let late = send(&scheduler, &[1], &[1.0], timeout(Duration::from_micros(1)));
    wait_queued("delay_action", 1);
    let patient = send(&scheduler, &[1], &[2.0], CallContext::now());
    wait_queued("delay_action", 2);
    gate.release(3);
    for task in [first, late, patient] {
        assert!(outcome(task).await.0.is_ok());
    }
    let order = gate.read(|s| s.computed.clone());
    assert_eq!(order, [vec![0.0], vec![2.0], vec![1.0]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_level_refuses_at_once() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("level_full", 1, Execution::Async, &gate);
    let one = LevelPolicy {
        max_queue_size: 1,
        ..LevelPolicy::default()
    };
    let scheduler = scheduler(model, 1, 64, levels(one, 1, 0));
    let first = send(&scheduler, &[1], &[0.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let second = send(&scheduler, &[1], &[1.0], CallContext::now());
    wait_queued("level_full", 1);
    let third = send(&scheduler, &[1], &[2.0], CallContext::now());
    let error = outcome(third).await.0.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Overloaded, "{error}");
    assert!(error.message().contains("max_queue_size"), "{error}");
    gate.release(2);
    assert!(outcome(first).await.0.is_ok());
    assert!(outcome(second).await.0.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_objective_get_the_flagged_default() {
    let gate = Arc::new(Gate::default());
    let model = Gated::new("objective", 1, Execution::Async, &gate);
    let scheduling = Scheduling {
        slo: Some(Slo {
            latency: Duration::from_millis(150),
            defaults: vec![DefaultOutput {
                name: "y".into(),
                shape: vec![-1],
                row: TensorData::Fp32(vec![-1.5]),
            }],
        }),
        ..Scheduling::default()
    };
    let scheduler = scheduler(model, 1, 64, scheduling);
    // The first computes past its objective; the second waits behind it.
    let first = send(&scheduler, &[2], &[1.0, 2.0], CallContext::now());
    gate.wait_until("the first compute", |s| s.started == 1);
    let second = send(&scheduler, &[1], &[3.0], CallContext::now());
    for (task, rows) in [(first, 2), (second, 1)] {
        let (values, default) = outcome(task).await.0.unwrap();
        assert_eq!(values, vec![-1.5; rows]);
        assert!(default, "flagged as the default");
    }
    let defaults = scheduler
        .counters()
        .defaults
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        defaults, 2,
        "the queued one, and the computing one at its objective"
    );
    // Once its default is out, nobody waits for the first's compute: a
    // model that awaits is cancelled, and its slot comes back.
    gate.wait_until("the first compute to be cancelled", |s| s.cancelled >= 1);
    gate.release(2);
}
