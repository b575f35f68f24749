//! The selection policies and their learned state: pure state machines,
//! no serving (tested here against simulated labellers).
//!
//! - **Exp3** (Auer, Cesa-Bianchi, Freund and Schapire, 2002), the bandit
//!   Clipper uses to pick one model: candidate `i` answers with probability
//!   `p_i = (1 - γ) w_i / Σ w + γ / K`. Feedback scores one candidate,
//!   drawn with the same probabilities (a bandit sees one arm's loss), and
//!   its weight grows by `exp(γ (1 - loss) / (p_i K))`. With
//!   `γ = min(1, sqrt(K ln K / ((e - 1) g)))`, its expected regret over the
//!   rounds against the best candidate is at most
//!   `2 sqrt(e - 1) sqrt(g K ln K)` for any `g` at least the best
//!   candidate's total reward (Auer et al., Corollary 3.2).
//! - **Exp4**, as Clipper's ensemble: every candidate answers; the outputs
//!   are averaged with weights `w_i / Σ w`; feedback scores every
//!   candidate, and each weight shrinks by `exp(-η loss_i)`.
//! - **Fixed**: the first candidate. **Weighted**: candidates by fixed
//!   shares (an A/B test, a canary); a query with a key always lands on
//!   the same candidate (the key's hash picks it), one without is drawn.
//!
//! Weights are kept as logarithms, so that a long run neither overflows
//! nor loses the smaller ones; each key (a user) has its own, in a map of
//! at most `max_keys`, least recently used dropped first.

use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{Candidate, Choice, Draw, SelectionReport};
use lru::LruCache;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

/// A policy and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Policy {
    /// Exp3 with exploration `gamma` in (0, 1].
    Exp3 { gamma: f64 },
    /// Exp4 with learning rate `eta` > 0.
    Exp4 { eta: f64 },
    /// Always the first candidate.
    Fixed,
    /// Fixed shares, one per candidate, summing to 1.
    Weighted { shares: Vec<f64> },
}

impl Policy {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Policy::Exp3 { .. } => "exp3",
            Policy::Exp4 { .. } => "exp4",
            Policy::Fixed => "fixed",
            Policy::Weighted { .. } => "weighted",
        }
    }

    fn learns(&self) -> bool {
        matches!(self, Policy::Exp3 { .. } | Policy::Exp4 { .. })
    }
}

/// The learned state, as saved to a file and read back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedState {
    pub(crate) policy: String,
    pub(crate) candidates: Vec<String>,
    /// The log-weights of queries without a key.
    pub(crate) shared: Vec<f64>,
    /// Each key's log-weights, least recently used first.
    pub(crate) keys: Vec<(String, Vec<f64>)>,
    pub(crate) feedback: u64,
}

/// A policy with its state and counters: what the application's
/// [`Selector`](wirespeed_core::Selector) answers with.
pub(crate) struct Selection {
    candidates: Vec<Candidate>,
    policy: Policy,
    state: Mutex<States>,
    rng: Mutex<StdRng>,
    selections: Vec<AtomicU64>,
    stragglers: Vec<AtomicU64>,
    feedback: AtomicU64,
    evicted: AtomicU64,
}

struct States {
    shared: Vec<f64>,
    /// Grown as keys come (not allocated for `max` up front), at most
    /// `max`, the least recently used out.
    keys: LruCache<String, Vec<f64>>,
    max: usize,
}

impl Selection {
    /// A fresh state: every candidate weighted alike.
    pub(crate) fn new(
        candidates: Vec<Candidate>,
        policy: Policy,
        max_keys: NonZeroUsize,
        seed: Option<u64>,
    ) -> Selection {
        let k = candidates.len();
        Selection {
            selections: (0..k).map(|_| AtomicU64::new(0)).collect(),
            stragglers: (0..k).map(|_| AtomicU64::new(0)).collect(),
            candidates,
            policy,
            state: Mutex::new(States {
                shared: vec![0.0; k],
                keys: LruCache::unbounded(),
                max: max_keys.get(),
            }),
            rng: Mutex::new(match seed {
                Some(seed) => StdRng::seed_from_u64(seed),
                None => rand::make_rng(),
            }),
            feedback: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The state to save.
    pub(crate) fn save(&self) -> SavedState {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<(String, Vec<f64>)> = state
            .keys
            .iter()
            .map(|(k, w)| (k.clone(), w.clone()))
            .collect();
        keys.reverse();
        SavedState {
            policy: self.policy.name().to_owned(),
            candidates: self.candidates.iter().map(|c| c.to_string()).collect(),
            shared: state.shared.clone(),
            keys,
            feedback: self.feedback.load(Ordering::Relaxed),
        }
    }

    /// Takes up a saved state, if it was saved by the same policy over
    /// the same candidates; otherwise says why not.
    pub(crate) fn restore(&self, saved: SavedState) -> Result<(), String> {
        let names: Vec<String> = self.candidates.iter().map(|c| c.to_string()).collect();
        if saved.policy != self.policy.name() || saved.candidates != names {
            return Err(format!(
                "it was saved by policy '{}' over [{}]; this application is '{}' over [{}]",
                saved.policy,
                saved.candidates.join(", "),
                self.policy.name(),
                names.join(", ")
            ));
        }
        let k = names.len();
        let fits = |w: &[f64]| w.len() == k && w.iter().all(|x| x.is_finite());
        if !fits(&saved.shared) || !saved.keys.iter().all(|(_, w)| fits(w)) {
            return Err(format!("its weights are not {k} finite numbers each"));
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.shared = saved.shared;
        state.keys.clear();
        for (key, weights) in saved.keys {
            state.keys.put(key, weights);
        }
        while state.keys.len() > state.max {
            state.keys.pop_lru();
        }
        self.feedback.store(saved.feedback, Ordering::Relaxed);
        Ok(())
    }

    /// The probabilities each candidate is chosen with for `key`.
    pub(crate) fn probabilities(&self, key: Option<&str>) -> Vec<f64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let weights = normalised(&state.weights(key));
        match &self.policy {
            Policy::Exp3 { gamma } => {
                let k = weights.len() as f64;
                weights
                    .iter()
                    .map(|w| (1.0 - gamma) * w + gamma / k)
                    .collect()
            }
            Policy::Exp4 { .. } => weights,
            Policy::Fixed => (0..weights.len()).map(|i| f64::from(i == 0)).collect(),
            Policy::Weighted { shares } => shares.clone(),
        }
    }

    fn draw(&self, probabilities: &[f64]) -> usize {
        let x: f64 = self.rng.lock().unwrap_or_else(|e| e.into_inner()).random();
        pick(probabilities, x)
    }
}

impl States {
    /// The log-weights of `key`'s state (made most recent); a key that
    /// has learned nothing yet starts alike for every candidate, and is
    /// kept only once it learns.
    fn weights(&mut self, key: Option<&str>) -> Vec<f64> {
        match key {
            None => self.shared.clone(),
            Some(key) => match self.keys.get(key) {
                Some(weights) => weights.clone(),
                None => vec![0.0; self.shared.len()],
            },
        }
    }

    /// `key`'s log-weights, and whether a least recently used key was
    /// dropped to make room for it.
    fn entry(&mut self, key: &str) -> (&mut Vec<f64>, bool) {
        let mut evicted = false;
        if !self.keys.contains(key) {
            if self.keys.len() >= self.max {
                evicted = self.keys.pop_lru().is_some();
            }
            self.keys.put(key.to_owned(), vec![0.0; self.shared.len()]);
        }
        let weights = self.keys.get_mut(key).expect("the key was just put");
        (weights, evicted)
    }
}

/// The candidate that `x` in [0, 1) falls on, laying out the
/// probabilities end to end.
fn pick(probabilities: &[f64], x: f64) -> usize {
    let total: f64 = probabilities.iter().sum();
    let mut at = x * total;
    for (i, p) in probabilities.iter().enumerate() {
        if at < *p {
            return i;
        }
        at -= p;
    }
    probabilities.iter().rposition(|p| *p > 0.0).unwrap_or(0)
}

/// Log-weights as weights summing to 1.
fn normalised(log_weights: &[f64]) -> Vec<f64> {
    let max = log_weights
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = log_weights.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = w.iter().sum();
    w.into_iter().map(|x| x / total).collect()
}

/// Where `key` falls in [0, 1), the same every time (FNV-1a: stable
/// across runs and builds, unlike the standard library's hasher).
fn position(key: &str) -> f64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 ^= u64::from(*b);
                self.0 = self.0.wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    key.hash(&mut h);
    // The top 53 bits, mixed once more (FNV's low bits are weak).
    let mixed = h.finish() ^ (h.finish() >> 29);
    let mixed = mixed.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

/// The application's side of [`Selector`], but for its key.
impl Selection {
    pub(crate) fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    pub(crate) fn choose(&self, key: Option<&str>) -> Choice {
        let choice = match (&self.policy, key) {
            (Policy::Exp4 { .. }, _) => Choice::Blend(self.probabilities(key)),
            (Policy::Fixed, _) => Choice::One(0),
            (Policy::Weighted { shares }, Some(key)) => Choice::One(pick(shares, position(key))),
            (_, key) => Choice::One(self.draw(&self.probabilities(key))),
        };
        match &choice {
            Choice::One(i) => {
                self.selections[*i].fetch_add(1, Ordering::Relaxed);
            }
            Choice::Blend(_) => {
                for s in &self.selections {
                    s.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        choice
    }

    pub(crate) fn to_score(&self, key: Option<&str>) -> Vec<Draw> {
        match &self.policy {
            Policy::Exp3 { .. } => {
                let p = self.probabilities(key);
                let candidate = self.draw(&p);
                vec![Draw {
                    candidate,
                    probability: p[candidate],
                }]
            }
            Policy::Exp4 { .. } => (0..self.candidates.len())
                .map(|candidate| Draw {
                    candidate,
                    probability: 1.0,
                })
                .collect(),
            Policy::Fixed | Policy::Weighted { .. } => Vec::new(),
        }
    }

    pub(crate) fn learn(&self, key: Option<&str>, scored: &[(Draw, f64)]) {
        self.feedback.fetch_add(1, Ordering::Relaxed);
        if !self.policy.learns() || scored.is_empty() {
            return;
        }
        let k = self.candidates.len() as f64;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let weights = match key {
            None => &mut state.shared,
            Some(key) => {
                let (weights, evicted) = state.entry(key);
                if evicted {
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
                weights
            }
        };
        for (draw, loss) in scored {
            let Some(w) = weights.get_mut(draw.candidate) else {
                continue;
            };
            let loss = loss.clamp(0.0, 1.0);
            *w += match self.policy {
                Policy::Exp3 { gamma } => {
                    gamma * (1.0 - loss) / (draw.probability.max(f64::MIN_POSITIVE) * k)
                }
                Policy::Exp4 { eta } => -eta * loss,
                Policy::Fixed | Policy::Weighted { .. } => 0.0,
            };
        }
        // Keep the largest at 0: the same weights, never overflowing.
        let max = weights.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max.is_finite() {
            for w in weights.iter_mut() {
                *w -= max;
            }
        }
    }

    pub(crate) fn straggled(&self, candidate: usize) {
        if let Some(s) = self.stragglers.get(candidate) {
            s.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn report(&self) -> SelectionReport {
        let load = |v: &[AtomicU64]| v.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let keys = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.keys.len() as u64
        };
        SelectionReport {
            policy: self.policy.name(),
            selections: load(&self.selections),
            weights: self.probabilities(None),
            stragglers: load(&self.stragglers),
            feedback: self.feedback.load(Ordering::Relaxed),
            keys,
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(k: usize) -> Vec<Candidate> {
        (0..k)
            .map(|i| Candidate {
                model: format!("m{i}"),
                version: None,
            })
            .collect()
    }

    fn selection(policy: Policy, k: usize) -> Selection {
        Selection::new(
            candidates(k),
            policy,
            NonZeroUsize::new(1000).unwrap(),
            Some(7),
        )
    }

    /// A labeller and candidates right with known probabilities: the loss
    /// of candidate `i` on the next query, 0 or 1.
    struct Labeller {
        rng: StdRng,
        accuracy: Vec<f64>,
    }

    impl Labeller {
        fn new(accuracy: &[f64]) -> Labeller {
            Labeller {
                rng: StdRng::seed_from_u64(11),
                accuracy: accuracy.to_vec(),
            }
        }

        fn losses(&mut self) -> Vec<f64> {
            let accuracy = self.accuracy.clone();
            accuracy
                .iter()
                .map(|a| f64::from(self.rng.random::<f64>() >= *a))
                .collect()
        }
    }

    /// Exp3 over two candidates right 90% and 60% of the time, with
    /// Auer et al.'s γ for N = 2,000 rounds (g = N): its regret stays
    /// under their bound, 2 sqrt(e - 1) sqrt(g K ln K) ≈ 138.6, and it
    /// ends choosing the better one for most queries.
    #[test]
    fn exp3_learns_the_better_candidate_within_its_regret_bound() {
        const N: usize = 2000;
        let k = 2.0_f64;
        let e = std::f64::consts::E;
        let g = N as f64;
        let gamma = (k * k.ln() / ((e - 1.0) * g)).sqrt().min(1.0);
        let bound = 2.0 * (e - 1.0).sqrt() * (g * k * k.ln()).sqrt();
        let s = selection(Policy::Exp3 { gamma }, 2);
        let mut labeller = Labeller::new(&[0.9, 0.6]);
        let mut reward = 0.0;
        let mut best = 0.0;
        for _ in 0..N {
            let losses = labeller.losses();
            let [draw] = s.to_score(None)[..] else {
                panic!("exp3 scores one draw");
            };
            reward += 1.0 - losses[draw.candidate];
            best += 1.0 - losses[0];
            s.learn(None, &[(draw, losses[draw.candidate])]);
        }
        let regret = best - reward;
        assert!(
            regret <= bound,
            "regret {regret} over {N} rounds exceeds the bound {bound}"
        );
        let p = s.probabilities(None);
        assert!(p[0] > 0.9, "the better candidate is chosen with p {p:?}");
        let chosen = (0..1000)
            .filter(|_| s.choose(None) == Choice::One(0))
            .count();
        assert!(chosen > 900, "{chosen} of 1000 queries to the better one");
    }

    #[test]
    fn exp4_weights_move_toward_the_better_candidate() {
        let s = selection(Policy::Exp4 { eta: 0.1 }, 3);
        let mut labeller = Labeller::new(&[0.6, 0.9, 0.5]);
        assert_eq!(s.choose(None), Choice::Blend(vec![1.0 / 3.0; 3]));
        let mut last = 1.0 / 3.0;
        for round in 1..=300 {
            let losses = labeller.losses();
            let scored: Vec<(Draw, f64)> = s
                .to_score(None)
                .into_iter()
                .map(|d| (d, losses[d.candidate]))
                .collect();
            assert_eq!(scored.len(), 3, "exp4 scores every candidate");
            s.learn(None, &scored);
            if round % 100 == 0 {
                let Choice::Blend(w) = s.choose(None) else {
                    panic!("exp4 blends")
                };
                assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
                assert!(w[1] > last, "round {round}: {w:?}");
                last = w[1];
            }
        }
        assert!(last > 0.9, "the better candidate's weight is {last}");
    }

    #[test]
    fn each_key_learns_alone_and_the_least_recent_are_dropped() {
        let s = Selection::new(
            candidates(2),
            Policy::Exp4 { eta: 0.5 },
            NonZeroUsize::new(2).unwrap(),
            Some(1),
        );
        for _ in 0..50 {
            let a = [
                (s.to_score(Some("a"))[0], 1.0),
                (s.to_score(Some("a"))[1], 0.0),
            ];
            s.learn(Some("a"), &a);
            let b = [
                (s.to_score(Some("b"))[0], 0.0),
                (s.to_score(Some("b"))[1], 1.0),
            ];
            s.learn(Some("b"), &b);
        }
        let pa = s.probabilities(Some("a"));
        let pb = s.probabilities(Some("b"));
        assert!(pa[1] > 0.99 && pb[0] > 0.99, "a {pa:?}, b {pb:?}");
        assert_eq!(
            s.probabilities(None),
            vec![0.5, 0.5],
            "the shared state learned nothing"
        );
        // A third key evicts the least recently used ("a", as "b" was
        // used last).
        s.learn(Some("c"), &[(s.to_score(Some("c"))[0], 1.0)]);
        let report = s.report();
        assert_eq!((report.keys, report.evicted), (2, 1));
        assert_eq!(s.probabilities(Some("b")), pb, "b kept its state");
        assert_eq!(s.report().evicted, 1);
    }

    /// A split of 80/20 over 10,000 queries without a key lands within
    /// 2% of its shares; a key always lands on the same candidate, and
    /// keys spread by the shares too.
    #[test]
    fn weighted_splits_by_share_and_sticks_by_key() {
        let s = selection(
            Policy::Weighted {
                shares: vec![0.8, 0.2],
            },
            2,
        );
        let first = (0..10_000)
            .filter(|_| s.choose(None) == Choice::One(0))
            .count();
        assert!((7800..=8200).contains(&first), "{first} of 10000");
        let by_key = (0..10_000)
            .filter(|u| s.choose(Some(&format!("user-{u}"))) == Choice::One(0))
            .count();
        assert!((7800..=8200).contains(&by_key), "{by_key} of 10000 keys");
        for u in 0..100 {
            let key = format!("user-{u}");
            let once = s.choose(Some(&key));
            assert!((0..20).all(|_| s.choose(Some(&key)) == once), "{key}");
        }
        assert!(s.to_score(None).is_empty(), "a fixed split learns nothing");
    }

    #[test]
    fn saved_state_comes_back_and_a_misfit_is_refused() {
        let s = selection(Policy::Exp4 { eta: 0.3 }, 2);
        s.learn(None, &[(s.to_score(None)[0], 1.0)]);
        s.learn(Some("u"), &[(s.to_score(Some("u"))[1], 1.0)]);
        let saved = s.save();
        let text = serde_json::to_string(&saved).unwrap();
        let back = selection(Policy::Exp4 { eta: 0.3 }, 2);
        back.restore(serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back.probabilities(None), s.probabilities(None));
        assert_eq!(back.probabilities(Some("u")), s.probabilities(Some("u")));
        assert_eq!(back.report().feedback, 2);
        let other = selection(Policy::Exp3 { gamma: 0.1 }, 2);
        let e = other.restore(saved.clone()).unwrap_err();
        assert!(e.contains("policy 'exp4'"), "{e}");
        let three = selection(Policy::Exp4 { eta: 0.3 }, 3);
        assert!(three.restore(saved).is_err());
    }

    #[test]
    fn fixed_always_answers_with_the_first() {
        let s = selection(Policy::Fixed, 3);
        assert!((0..100).all(|_| s.choose(Some("x")) == Choice::One(0)));
        assert_eq!(s.report().selections, vec![100, 0, 0]);
    }
}
