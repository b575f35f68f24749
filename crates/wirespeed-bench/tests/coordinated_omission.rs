//! The engine against small servers written here: one that stalls once
//! (the corrected percentiles must show the stall, the uncorrected ones
//! must hide it, as they do in tools that start the clock at the actual
//! send), one of fixed capacity (a sweep stops there), and hostile ones
//! (their answers are errors, with bounded memory, never a hang).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wirespeed_bench::engine::{measure, sweep, Load, Plan, Windows};
use wirespeed_bench::target::Target;
use wirespeed_bench::timer::Arrival;
use wirespeed_bench::workload::{Payload, Protocol, Workload};

/// An HTTP/1.1 server on a free port: for the `n`-th request head (counted
/// from 1 over all connections) it writes what `answer(n)` gives.
async fn serve<F, Fut>(answer: F) -> String
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = &'static [u8]> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    let counter = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (answer, counter) = (Arc::clone(&answer), Arc::clone(&counter));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        if socket.write_all(answer(n).await).await.is_err() {
                            return;
                        }
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    format!("http://{address}")
}

const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: total;dur=0.001\r\n\r\n{}";

/// A server that answers every GET with `{}` at once, except the
/// `stall_at`-th request, which it answers after `stall`; and the count of
/// requests it has seen.
async fn stalling_server(stall_at: usize, stall: Duration) -> (String, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let url = serve(move |n| {
        counter.fetch_max(n, Ordering::SeqCst);
        async move {
            if n == stall_at {
                tokio::time::sleep(stall).await;
            }
            ANSWER
        }
    })
    .await;
    (url, seen)
}

/// A server that answers one request at a time, each after `service`: its
/// capacity is 1 / `service` whatever the connections.
async fn one_at_a_time_server(service: Duration) -> String {
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    serve(move |_| {
        let turn = Arc::clone(&turn);
        async move {
            let _one = turn.lock().await;
            tokio::time::sleep(service).await;
            ANSWER
        }
    })
    .await
}

fn plan(load: Load, window: Duration, max_requests: Option<u64>) -> Plan {
    let workload = Workload::new(Protocol::Get, "", "", Payload::Empty);
    Plan {
        protocol: Protocol::Get,
        request: workload.build().unwrap(),
        load,
        windows: Windows {
            warmup: Duration::ZERO,
            window,
            min_windows: 1,
            max_windows: 1,
            stable: 1.0,
            max_requests,
            timeout: Duration::from_secs(10),
        },
        pace: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shows_in_the_corrected_percentiles_only() {
    // 100 requests a second on one connection for 4 s; request 50 stalls
    // for 1 s, so ~100 requests that were due during the stall go out late.
    let (url, seen) = stalling_server(50, Duration::from_secs(1)).await;
    let target: Target = url.parse().unwrap();
    let load = Load::Open {
        rate: 100.0,
        arrival: Arrival::Constant,
        connections: 1,
    };
    let m = measure(
        &plan(load, Duration::from_secs(4), None),
        &[target],
        &ProgressBar::hidden(),
    )
    .await
    .unwrap()
    .remove(0);
    let s = &m.summary;
    // Every request that was sent was answered and counted, and no more
    // were sent than the schedule holds (100 a second for 4 s).
    assert_eq!(s.failed, 0, "{:?}", s.errors);
    assert_eq!(s.answered as usize, seen.load(Ordering::SeqCst));
    assert!(
        s.answered > 50 && s.answered <= 401,
        "answered {}",
        s.answered
    );
    // The stalled request itself took the whole second, measured either way.
    assert!(
        s.uncorrected.max >= 1000.0,
        "uncorrected max {}",
        s.uncorrected.max
    );
    // The ~50 requests due in the stall's first half went out after it
    // ended: each waited at least 0.5 s from its intended time, and they
    // are more than a tenth of the run, so the corrected p90 shows it
    // however fast the machine. Counted from the actual send, they do not.
    assert!(s.latency.p90 >= 500.0, "corrected p90 {} ms", s.latency.p90);
    assert!(
        s.uncorrected.p90 < s.latency.p90,
        "uncorrected p90 {} ms, corrected {} ms",
        s.uncorrected.p90,
        s.latency.p90
    );
    // A request is never sent before it is due: uncorrected is never above
    // corrected.
    for (u, c) in [
        (s.uncorrected.p50, s.latency.p50),
        (s.uncorrected.p99, s.latency.p99),
        (s.uncorrected.max, s.latency.max),
    ] {
        assert!(u <= c + 1e-9, "uncorrected {u} ms above corrected {c} ms");
    }
    // The figures are consistent.
    let l = &s.latency;
    assert!(
        l.min <= l.p50 && l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p99_9 && l.p99_9 <= l.max
    );
    assert_eq!(s.server["total"].count, s.answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_loop_sends_exactly_the_request_budget() {
    let (url, seen) = stalling_server(usize::MAX, Duration::ZERO).await;
    let target: Target = url.parse().unwrap();
    let m = measure(
        &plan(
            Load::Closed { connections: 4 },
            Duration::from_secs(5),
            Some(500),
        ),
        &[target],
        &ProgressBar::hidden(),
    )
    .await
    .unwrap()
    .remove(0);
    assert_eq!(m.summary.answered, 500);
    assert_eq!(seen.load(Ordering::SeqCst), 500);
    // In a closed loop a request is sent when it is meant to be.
    assert_eq!(m.summary.latency, m.summary.uncorrected);
    let phases = m.summary.wait.unwrap();
    assert_eq!(phases.count, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_counted_by_kind() {
    // Nothing listens on this port (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target: Target = format!("http://127.0.0.1:{port}").parse().unwrap();
    let e = measure(
        &plan(
            Load::Closed { connections: 1 },
            Duration::from_millis(100),
            None,
        ),
        &[target],
        &ProgressBar::hidden(),
    )
    .await
    .err()
    .unwrap();
    assert!(
        format!("{e:#}").contains("cannot connect to http://127.0.0.1"),
        "{e:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_sweep_stops_where_connections_stop_adding_throughput() {
    // 100 requests a second at most: one connection already takes all of
    // it (each waits 10 ms), so two cannot add 5 %, and the sweep stops
    // there without trying eight.
    let url = one_at_a_time_server(Duration::from_millis(10)).await;
    let target: Target = url.parse().unwrap();
    let plan = plan(
        Load::Closed { connections: 1 },
        Duration::from_millis(600),
        None,
    );
    let points = sweep(
        &plan,
        &[1.0, 2.0, 8.0],
        None,
        &[target],
        &ProgressBar::hidden(),
    )
    .await
    .unwrap();
    assert_eq!(
        points.len(),
        2,
        "{:?}",
        points.iter().map(|p| p.offered).collect::<Vec<_>>()
    );
    assert!(points[0].saturated.is_none());
    let why = points[1].saturated.as_deref().unwrap();
    assert!(why.contains("within 5 %"), "{why}");
    for p in &points {
        let s = &p.measurements[0].summary;
        assert_eq!(s.failed, 0);
        assert!(s.throughput < 110.0, "{}", s.throughput);
    }
    // Two connections share the one server: each waits for the other.
    let one = points[0].measurements[0].summary.latency.p50;
    let two = points[1].measurements[0].summary.latency.p50;
    assert!(
        two > one,
        "p50 {one} ms with one connection, {two} ms with two"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_answers_are_counted_errors() {
    // A head that never ends: each request fails as invalid data, at once.
    // A body announced far longer than what comes: the request times out
    // (the run is bounded by the timeout), and the client, which drops a
    // body as it reads it, holds no more than its read buffer.
    static LONG_HEADER: [u8; 200_000] = [b'a'; 200_000];
    let endless = serve(|_| async {
        let mut all = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
        all.extend_from_slice(&LONG_HEADER);
        &*Box::leak(all.into_boxed_slice())
    })
    .await;
    let short_body =
        serve(|_| async { &b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}"[..] })
            .await;
    for (url, kind) in [(endless, "io: invalid data"), (short_body, "timeout")] {
        let target: Target = url.parse().unwrap();
        let mut plan = plan(
            Load::Closed { connections: 1 },
            Duration::from_millis(300),
            Some(3),
        );
        plan.windows.timeout = Duration::from_millis(500);
        // Never a hang: the safety net only fails the test if it would.
        let m = tokio::time::timeout(
            Duration::from_secs(60),
            measure(&plan, &[target], &ProgressBar::hidden()),
        )
        .await
        .expect("the run ends at its timeout")
        .unwrap()
        .remove(0);
        assert_eq!(m.summary.answered, 0);
        assert_eq!(
            m.summary.errors.keys().collect::<Vec<_>>(),
            [kind],
            "{:?}",
            m.summary.errors
        );
        assert!(m.summary.failed >= 1);
    }
}
