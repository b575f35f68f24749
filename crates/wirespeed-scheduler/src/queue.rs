//! The queue of one model, as its actor holds it: a FIFO per priority
//! level (Triton's level 1 first), each with a second FIFO of requests
//! whose queue timeout passed under `timeout_action = "delay"`, served
//! after the level's others; and the choice of the next batch.
//!
//! The next batch starts at the first request in that order. Later
//! requests join it when they are compatible (`BatchKey`: the same
//! datatypes, the same dimensions after the first, the same outputs and
//! parameters) and fit under the batch size; the others keep their place
//! for a later batch. Whether it goes now follows Triton's dynamic
//! batcher: at once when its rows are a preferred size (the largest such
//! prefix) or reach the target size, when no delay is configured, or when
//! its oldest request has waited `max_queue_delay`; else the actor waits
//! until then or the next arrival.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use crate::policy::{Batching, LevelPolicy, TimeoutAction};
use tokio::sync::oneshot;
use tracing::Span;
use wirespeed_core::{DataType, Parameters};

use crate::{Job, Lead, Outcome};

/// Requests looked at, past the first, when forming one batch: bounds
/// the actor's work per batch under a deep queue of mixed requests.
const SCAN_LIMIT: usize = 4096;

/// What requests must share to be joined: per input (in the model's
/// order) the datatype and the dimensions after the first, the outputs
/// asked for, and the parameters the model gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchKey {
    hash: u64,
    inputs: Vec<(DataType, Vec<usize>)>,
    outputs: Vec<usize>,
    parameters: Parameters,
}

impl BatchKey {
    pub(crate) fn new(
        inputs: Vec<(DataType, Vec<usize>)>,
        outputs: Vec<usize>,
        parameters: Parameters,
    ) -> BatchKey {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        inputs.hash(&mut hasher);
        outputs.hash(&mut hasher);
        for (name, _) in &parameters {
            name.hash(&mut hasher);
        }
        BatchKey {
            hash: hasher.finish(),
            inputs,
            outputs,
            parameters,
        }
    }

    fn joins(&self, other: &BatchKey) -> bool {
        self.hash == other.hash && self == other
    }
}

/// A request waiting in the queue.
pub(crate) struct Entry {
    pub(crate) job: Job,
    /// Its rows (dimension 0), 1 when it has none.
    pub(crate) rows: usize,
    /// `None`: it runs alone.
    pub(crate) key: Option<BatchKey>,
    pub(crate) arrived: Instant,
    pub(crate) level: usize,
    /// When its queue timeout passes, if it has one (and has not passed).
    pub(crate) timeout_at: Option<Instant>,
    /// When it misses the latency objective, if the model has one.
    pub(crate) slo_at: Option<Instant>,
    /// Its turn to lead the batch it is in.
    pub(crate) lead: oneshot::Sender<Lead>,
    /// Its answer.
    pub(crate) outcome: oneshot::Sender<Outcome>,
    /// Tells its caller the objective was missed, once it computes.
    pub(crate) expired: Option<oneshot::Sender<()>>,
    pub(crate) span: Span,
}

impl Entry {
    /// Whether its caller has gone (a client that left, a deadline).
    pub(crate) fn gone(&self) -> bool {
        self.outcome.is_closed()
    }
}

/// Why a request leaves the queue without computing.
pub(crate) enum Leaving {
    /// Its queue timeout passed under `reject`.
    TimedOut(Duration),
    /// It can no longer meet the latency objective.
    Late,
    /// Its caller has gone.
    Gone,
}

struct Level {
    policy: LevelPolicy,
    ready: VecDeque<Entry>,
    delayed: VecDeque<Entry>,
}

/// A model's waiting requests.
pub(crate) struct Queue {
    levels: Vec<Level>,
    len: usize,
}

/// The next batch, or when to look again.
pub(crate) enum Formed {
    /// Send these now, in queue order.
    Batch(Vec<Entry>),
    /// Wait for more requests, at most until then.
    Wait(Instant),
    /// Nothing waits.
    Empty,
}

/// Where an entry is: level, which FIFO (delayed or not), index.
type At = (usize, bool, usize);

impl Queue {
    pub(crate) fn new(levels: &[LevelPolicy]) -> Queue {
        Queue {
            levels: levels
                .iter()
                .map(|policy| Level {
                    policy: policy.clone(),
                    ready: VecDeque::new(),
                    delayed: VecDeque::new(),
                })
                .collect(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The policy of `level`.
    pub(crate) fn policy(&self, level: usize) -> &LevelPolicy {
        &self.levels[level].policy
    }

    /// Queues `entry`, or gives it back when its level is full.
    pub(crate) fn push(&mut self, entry: Entry) -> Option<Entry> {
        let level = &mut self.levels[entry.level];
        let held = level.ready.len() + level.delayed.len();
        if level.policy.max_queue_size != 0 && held >= level.policy.max_queue_size {
            return Some(entry);
        }
        level.ready.push_back(entry);
        self.len += 1;
        None
    }

    /// Applies the clock at `horizon` (`now`, or a little after when the
    /// queue thread wakes early): requests past their queue timeout are
    /// rejected or delayed, requests that can no longer meet the objective
    /// (`slo_at - estimate`) and those whose callers left are taken out and
    /// handed to `leave`. Returns when something next falls due, judged
    /// with `lookahead` as the estimate: the actor passes an `estimate` of
    /// zero while a slot is free, and the full one as `lookahead`, so that
    /// it looks again in time should every slot be busy by then. What it
    /// returns is always after `horizon`.
    pub(crate) fn expire(
        &mut self,
        now: Instant,
        horizon: Instant,
        estimate: Duration,
        lookahead: Duration,
        mut leave: impl FnMut(Entry, Leaving),
    ) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut removed = 0;
        for level in &mut self.levels {
            let action = level.policy.timeout_action;
            let mut to_delay = Vec::new();
            for delayed in [false, true] {
                let fifo = if delayed {
                    &mut level.delayed
                } else {
                    &mut level.ready
                };
                let mut kept = VecDeque::with_capacity(fifo.len());
                for mut entry in fifo.drain(..) {
                    let leaving = if entry.gone() {
                        Some(Leaving::Gone)
                    } else if entry
                        .slo_at
                        .is_some_and(|at| at.checked_sub(estimate).unwrap_or(at) <= horizon)
                    {
                        Some(Leaving::Late)
                    } else if entry.timeout_at.is_some_and(|at| at <= horizon) {
                        match action {
                            TimeoutAction::Reject => Some(Leaving::TimedOut(
                                now.saturating_duration_since(entry.arrived),
                            )),
                            TimeoutAction::Delay => {
                                entry.timeout_at = None;
                                to_delay.push(entry);
                                continue;
                            }
                        }
                    } else {
                        None
                    };
                    if let Some(why) = leaving {
                        removed += 1;
                        leave(entry, why);
                        continue;
                    }
                    let falls_due = [
                        // Past its lookahead point but kept (a slot was
                        // free): nothing is due before the objective.
                        entry.slo_at.map(|at| {
                            at.checked_sub(lookahead)
                                .filter(|early| *early > horizon)
                                .unwrap_or(at)
                        }),
                        entry.timeout_at,
                    ];
                    for t in falls_due.into_iter().flatten() {
                        next = Some(next.map_or(t, |n| n.min(t)));
                    }
                    kept.push_back(entry);
                }
                *fifo = kept;
            }
            level.delayed.extend(to_delay);
        }
        self.len -= removed;
        next
    }

    /// The next batch under `batching` (each request alone when `None`),
    /// with at most `size` rows, at `now`.
    pub(crate) fn form(
        &mut self,
        batching: Option<&Batching>,
        size: usize,
        now: Instant,
    ) -> Formed {
        let order = self.order();
        let Some(&head_at) = order.first() else {
            return Formed::Empty;
        };
        let head = self.get(head_at);
        let Some((batching, key)) = batching.zip(head.key.as_ref()) else {
            return Formed::Batch(self.take(&[head_at]));
        };
        if head.rows >= size {
            return Formed::Batch(self.take(&[head_at]));
        }
        let preferred: &[usize] = if batching.adaptive.is_some() {
            &[]
        } else {
            &batching.preferred_batch_sizes
        };
        let target = preferred.last().copied().unwrap_or(size).min(size);
        let mut taken = vec![head_at];
        let mut rows = head.rows;
        let mut oldest = head.arrived;
        let mut best = preferred.contains(&rows).then_some(1);
        let mut full = false;
        for &at in order.iter().skip(1).take(SCAN_LIMIT) {
            let entry = self.get(at);
            if !entry.key.as_ref().is_some_and(|k| k.joins(key)) {
                continue;
            }
            if rows + entry.rows > size {
                full = true;
                continue;
            }
            taken.push(at);
            rows += entry.rows;
            oldest = oldest.min(entry.arrived);
            if preferred.contains(&rows) {
                best = Some(taken.len());
            }
            if rows >= size {
                full = true;
                break;
            }
        }
        let delay = batching.max_queue_delay;
        let waited_enough = !delay.is_zero() && now.duration_since(oldest) >= delay;
        if let Some(n) = best.filter(|_| !waited_enough) {
            taken.truncate(n);
        } else if !(full || rows >= target || delay.is_zero() || waited_enough) {
            return Formed::Wait(oldest + delay);
        }
        Formed::Batch(self.take(&taken))
    }

    /// Every entry's place, in the order they are served.
    fn order(&self) -> Vec<At> {
        let mut order = Vec::with_capacity(self.len.min(SCAN_LIMIT + 1));
        for (l, level) in self.levels.iter().enumerate() {
            order.extend((0..level.ready.len()).map(|i| (l, false, i)));
            order.extend((0..level.delayed.len()).map(|i| (l, true, i)));
            if order.len() > SCAN_LIMIT {
                break;
            }
        }
        order
    }

    fn get(&self, (level, delayed, i): At) -> &Entry {
        let level = &self.levels[level];
        if delayed {
            &level.delayed[i]
        } else {
            &level.ready[i]
        }
    }

    /// Takes the entries at `places` (in queue order) out of the queue.
    fn take(&mut self, places: &[At]) -> Vec<Entry> {
        let mut by_place: Vec<(usize, At)> = places.iter().copied().enumerate().collect();
        // Remove from the back of each FIFO first, so indices stay valid.
        by_place.sort_by_key(|&(_, at)| std::cmp::Reverse(at));
        let mut out: Vec<Option<Entry>> = places.iter().map(|_| None).collect();
        for (k, (level, delayed, i)) in by_place {
            let level = &mut self.levels[level];
            let fifo = if delayed {
                &mut level.delayed
            } else {
                &mut level.ready
            };
            out[k] = fifo.remove(i);
        }
        self.len -= places.len();
        out.into_iter().flatten().collect()
    }

    /// Empties the queue (the scheduler stops).
    pub(crate) fn drain(&mut self) -> Vec<Entry> {
        self.len = 0;
        let mut all = Vec::new();
        for level in &mut self.levels {
            all.extend(level.ready.drain(..));
            all.extend(level.delayed.drain(..));
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued request of `rows` rows at priority `level`, arrived at
    /// `arrived`, batching with others of key `key` (`None`: alone). The
    /// receivers are its caller's: dropping `outcome` makes it gone.
    struct Queued {
        entry: Entry,
        caller: Caller,
    }

    /// A caller's ends of its request: its turn to lead, its answer.
    type Caller = (oneshot::Receiver<Lead>, oneshot::Receiver<Outcome>);

    fn queued(id: i64, rows: usize, level: usize, arrived: Instant, key: Option<u8>) -> Queued {
        let (lead, lead_rx) = oneshot::channel();
        let (outcome, outcome_rx) = oneshot::channel();
        let key = key.map(|k| {
            BatchKey::new(
                vec![(DataType::Fp32, vec![usize::from(k)])],
                vec![0],
                Parameters::new(),
            )
        });
        Queued {
            entry: Entry {
                job: Job {
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    // The request's number, to tell entries apart.
                    parameters: vec![("id".into(), wirespeed_core::ParameterValue::Int(id))],
                    deadline: None,
                    trace: None,
                    responses: None,
                    input_parameters: Vec::new(),
                },
                rows,
                key,
                arrived,
                level,
                timeout_at: None,
                slo_at: None,
                lead,
                outcome,
                expired: None,
                span: Span::none(),
            },
            caller: (lead_rx, outcome_rx),
        }
    }

    fn id(entry: &Entry) -> i64 {
        match entry.job.parameters[0].1 {
            wirespeed_core::ParameterValue::Int(i) => i,
            _ => unreachable!(),
        }
    }

    fn ids(formed: Formed) -> Vec<i64> {
        match formed {
            Formed::Batch(entries) => entries.iter().map(id).collect(),
            Formed::Wait(_) => panic!("expected a batch, got a wait"),
            Formed::Empty => panic!("expected a batch, got nothing"),
        }
    }

    fn batching(max: usize, preferred: &[usize], delay_ms: u64) -> Batching {
        Batching {
            max_batch_size: max,
            preferred_batch_sizes: preferred.to_vec(),
            max_queue_delay: Duration::from_millis(delay_ms),
            adaptive: None,
        }
    }

    /// Queues `requests`; their callers stay while what this returns does.
    fn fill(queue: &mut Queue, requests: Vec<Queued>) -> Vec<Caller> {
        requests
            .into_iter()
            .map(|q| {
                assert!(queue.push(q.entry).is_none(), "the level is not full");
                q.caller
            })
            .collect()
    }

    #[test]
    fn a_higher_priority_level_is_served_first_and_each_level_in_order() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default(), LevelPolicy::default()]);
        let _callers = fill(
            &mut queue,
            vec![
                queued(1, 1, 1, now, None),
                queued(2, 1, 0, now, None),
                queued(3, 1, 1, now, None),
                queued(4, 1, 0, now, None),
            ],
        );
        let served: Vec<i64> = (0..4).flat_map(|_| ids(queue.form(None, 8, now))).collect();
        assert_eq!(served, [2, 4, 1, 3]);
        assert!(matches!(queue.form(None, 8, now), Formed::Empty));
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_full_level_gives_the_request_back() {
        let now = Instant::now();
        let level = LevelPolicy {
            max_queue_size: 1,
            ..LevelPolicy::default()
        };
        let mut queue = Queue::new(&[level]);
        let _first = fill(&mut queue, vec![queued(1, 1, 0, now, None)]);
        let second = queued(2, 1, 0, now, None);
        let refused = queue.push(second.entry).expect("the level holds one");
        assert_eq!(id(&refused), 2);
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn compatible_requests_join_and_others_keep_their_place() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default()]);
        let _callers = fill(
            &mut queue,
            vec![
                queued(1, 2, 0, now, Some(4)),
                queued(2, 1, 0, now, Some(8)),
                queued(3, 3, 0, now, Some(4)),
                queued(4, 1, 0, now, Some(4)),
            ],
        );
        let batching = batching(8, &[], 0);
        // 2 + 3 + 1 rows of key 4 join; key 8 waits for its own batch.
        assert_eq!(ids(queue.form(Some(&batching), 8, now)), [1, 3, 4]);
        assert_eq!(ids(queue.form(Some(&batching), 8, now)), [2]);
    }

    #[test]
    fn a_batch_stops_at_the_size_and_the_rest_waits_its_turn() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default()]);
        let _callers = fill(
            &mut queue,
            (1..=5).map(|i| queued(i, 2, 0, now, Some(1))).collect(),
        );
        let batching = batching(4, &[], 0);
        assert_eq!(ids(queue.form(Some(&batching), 4, now)), [1, 2]);
        assert_eq!(ids(queue.form(Some(&batching), 4, now)), [3, 4]);
        assert_eq!(ids(queue.form(Some(&batching), 4, now)), [5]);
    }

    #[test]
    fn a_preferred_size_goes_at_once_and_a_short_batch_waits_for_the_delay() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default()]);
        let _callers = fill(
            &mut queue,
            (1..=3).map(|i| queued(i, 1, 0, now, Some(1))).collect(),
        );
        let batching = batching(8, &[2, 4], 100);
        // Three rows: the largest preferred prefix (2) goes now.
        assert_eq!(ids(queue.form(Some(&batching), 8, now)), [1, 2]);
        // One row, under every preferred size: it waits for the delay...
        match queue.form(Some(&batching), 8, now) {
            Formed::Wait(until) => assert_eq!(until, now + Duration::from_millis(100)),
            _ => panic!("a short batch waits for max_queue_delay"),
        }
        // ...and goes once its oldest request has waited that long.
        let later = now + Duration::from_millis(100);
        assert_eq!(ids(queue.form(Some(&batching), 8, later)), [3]);
    }

    #[test]
    fn timed_out_requests_are_rejected_or_delayed_behind_the_others() {
        let now = Instant::now();
        let reject = LevelPolicy::default();
        let delay = LevelPolicy {
            timeout_action: TimeoutAction::Delay,
            ..LevelPolicy::default()
        };
        for (policy, rejected) in [(reject, true), (delay, false)] {
            let mut queue = Queue::new(&[policy]);
            let mut first = queued(1, 1, 0, now, None);
            first.entry.timeout_at = Some(now + Duration::from_millis(5));
            let _callers = fill(&mut queue, vec![first, queued(2, 1, 0, now, None)]);
            let mut left = Vec::new();
            let later = now + Duration::from_millis(10);
            queue.expire(
                later,
                later,
                Duration::ZERO,
                Duration::ZERO,
                |entry, why| {
                    left.push((id(&entry), matches!(why, Leaving::TimedOut(_))));
                },
            );
            if rejected {
                assert_eq!(left, [(1, true)]);
                assert_eq!(ids(queue.form(None, 8, later)), [2]);
            } else {
                // Delayed: served after the level's request that did not
                // time out.
                assert!(left.is_empty());
                assert_eq!(ids(queue.form(None, 8, later)), [2]);
                assert_eq!(ids(queue.form(None, 8, later)), [1]);
            }
        }
    }

    #[test]
    fn a_request_whose_caller_left_is_taken_out() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default()]);
        let mut callers = fill(
            &mut queue,
            vec![queued(1, 1, 0, now, None), queued(2, 1, 0, now, None)],
        );
        drop(callers.remove(0));
        let mut gone = Vec::new();
        queue.expire(now, now, Duration::ZERO, Duration::ZERO, |entry, why| {
            gone.push((id(&entry), matches!(why, Leaving::Gone)));
        });
        assert_eq!(gone, [(1, true)]);
        assert_eq!(queue.len(), 1);
        assert_eq!(ids(queue.form(None, 8, now)), [2]);
    }

    #[test]
    fn a_request_that_can_no_longer_meet_its_objective_leaves_late() {
        let now = Instant::now();
        let mut queue = Queue::new(&[LevelPolicy::default()]);
        let mut late = queued(1, 1, 0, now, None);
        late.entry.slo_at = Some(now + Duration::from_millis(10));
        let mut on_time = queued(2, 1, 0, now, None);
        on_time.entry.slo_at = Some(now + Duration::from_millis(100));
        let _callers = fill(&mut queue, vec![late, on_time]);
        let mut left = Vec::new();
        // A compute of 20 ms would end past the first's objective.
        let next = queue.expire(
            now,
            now,
            Duration::from_millis(20),
            Duration::from_millis(20),
            |entry, why| left.push((id(&entry), matches!(why, Leaving::Late))),
        );
        assert_eq!(left, [(1, true)]);
        // The other falls due when its objective minus the estimate comes.
        assert_eq!(next, Some(now + Duration::from_millis(80)));
    }
}
