//! The fault schedule of `caprl soak`: which fault comes next and when, drawn from the soak's
//! own seed and nothing else, so a failing schedule replays with the same `--seed`. The first
//! faults are one of each kind in a shuffled order, so that even a short soak meets them all.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `kill -9` of a role (the learner included).
    Kill,
    /// SIGSTOP of a role for longer than `runtime.ack_wait_secs`, then SIGCONT.
    Pause,
    /// `kill -9` of nats-server, restarted on the same port and file store after an outage.
    Broker,
    /// A second process of a role with the same identity (a second learner must be refused).
    Duplicate,
    /// The learner's next file write fails as on a full disk (RLIMIT_FSIZE).
    DiskFull,
    /// Several of the above at once.
    Burst,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Kill,
        Kind::Pause,
        Kind::Broker,
        Kind::Duplicate,
        Kind::DiskFull,
        Kind::Burst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Pause => "pause",
            Kind::Broker => "broker",
            Kind::Duplicate => "duplicate",
            Kind::DiskFull => "disk-full",
            Kind::Burst => "burst",
        }
    }
}

/// One fault: its kind, the role it hits (an index into the soak's roles; the learner is 0)
/// and how long it lasts (a pause, a broker outage, a duplicate's life). A burst's faults
/// are in `parts`.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: Kind,
    pub target: usize,
    pub lasts: Duration,
    pub parts: Vec<Fault>,
}

/// The fault stream of one soak.
pub struct FaultSchedule {
    rng: ChaCha8Rng,
    /// Kinds still to come before the random draws: one of each, shuffled.
    first: Vec<Kind>,
    mean_gap: Duration,
    roles: usize,
    /// A pause outlasts the ack wait by 1–4 s, so held work is redelivered.
    ack_wait: Duration,
}

impl FaultSchedule {
    pub fn new(seed: u64, mean_gap: Duration, roles: usize, ack_wait: Duration) -> FaultSchedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut first = Kind::ALL.to_vec();
        first.shuffle(&mut rng);
        FaultSchedule {
            rng,
            first,
            mean_gap,
            roles,
            ack_wait,
        }
    }

    /// The wait before the next fault (uniform over half to one and a half mean gaps) and
    /// the fault.
    pub fn next(&mut self) -> (Duration, Fault) {
        let gap = self.mean_gap.mul_f64(self.rng.random_range(0.5..1.5));
        let kind = match self.first.pop() {
            Some(k) => k,
            None => Kind::ALL[self.rng.random_range(0..Kind::ALL.len())],
        };
        (gap, self.fault(kind))
    }

    fn fault(&mut self, kind: Kind) -> Fault {
        let seconds = |rng: &mut ChaCha8Rng, lo: f64, hi: f64| {
            Duration::from_secs_f64(rng.random_range(lo..hi))
        };
        let target = self.rng.random_range(0..self.roles);
        let (target, lasts, parts) = match kind {
            Kind::Kill => (target, Duration::ZERO, Vec::new()),
            Kind::Pause => (
                target,
                self.ack_wait + seconds(&mut self.rng, 1.0, 4.0),
                Vec::new(),
            ),
            Kind::Broker => (0, seconds(&mut self.rng, 1.0, 12.0), Vec::new()),
            Kind::Duplicate => (target, seconds(&mut self.rng, 5.0, 15.0), Vec::new()),
            Kind::DiskFull => (0, Duration::ZERO, Vec::new()),
            Kind::Burst => {
                let n = self.rng.random_range(2..=4);
                let parts = (0..n)
                    .map(|_| {
                        let k = Kind::ALL[self.rng.random_range(0..Kind::ALL.len() - 1)];
                        self.fault(k)
                    })
                    .collect();
                (0, Duration::ZERO, parts)
            }
        };
        Fault {
            kind,
            target,
            lasts,
            parts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(seed: u64, n: usize) -> Vec<(Duration, Kind, usize, Duration, usize)> {
        let mut s = FaultSchedule::new(seed, Duration::from_secs(5), 5, Duration::from_secs(3));
        (0..n)
            .map(|_| {
                let (gap, f) = s.next();
                (gap, f.kind, f.target, f.lasts, f.parts.len())
            })
            .collect()
    }

    #[test]
    fn a_seed_replays_the_same_schedule_and_the_first_faults_are_one_of_each_kind() {
        assert_eq!(draws(7, 40), draws(7, 40));
        assert_ne!(draws(7, 40), draws(8, 40));
        let mut first: Vec<Kind> = draws(7, Kind::ALL.len()).iter().map(|d| d.1).collect();
        first.sort();
        assert_eq!(first, Kind::ALL.to_vec());
    }

    #[test]
    fn pauses_outlast_the_ack_wait_and_bursts_hold_no_bursts() {
        let mut s = FaultSchedule::new(3, Duration::from_secs(5), 5, Duration::from_secs(3));
        for _ in 0..500 {
            let (gap, f) = s.next();
            assert!(gap >= Duration::from_secs_f64(2.5) && gap <= Duration::from_secs_f64(7.5));
            assert!(f.target < 5);
            match f.kind {
                Kind::Pause => assert!(f.lasts > Duration::from_secs(4)),
                Kind::Burst => {
                    assert!((2..=4).contains(&f.parts.len()));
                    assert!(f.parts.iter().all(|p| p.kind != Kind::Burst));
                }
                _ => assert!(f.parts.is_empty()),
            }
        }
    }
}
