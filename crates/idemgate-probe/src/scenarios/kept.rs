//! Records kept: at the end of the run, the keys that ran earlier still replay their first
//! answer. An API that forgets a record early (a cache that evicts it, a record deleted
//! after a few replays, a lifetime shorter than the one advertised) runs a late retry
//! again (README "The contract": a record is kept for its TTL; draft-07 §2.5).

use std::time::Duration;

use tokio::time::Instant;

use super::{scenario, Scenario};
use crate::probe::{Probe, Ran};
use crate::report::Verdict;

/// How many times the run's oldest key is retried (a record deleted after a few replays).
const OLDEST_RETRIES: usize = 3;

/// How many other keys are retried, spread over the run.
const SPREAD: usize = 5;

/// The youngest the oldest key may be when retried: a record forgotten after a second or
/// two is forgotten by then.
const MIN_AGE: Duration = Duration::from_secs(3);

pub(crate) fn kept() -> Scenario {
    scenario!(
        "records-kept",
        Required,
        OLDEST_RETRIES + SPREAD,
        retried_late,
        "At the end of the run, keys that ran earlier (the oldest retried three times, \
         others spread over the run) still replay their first id, within their advertised \
         lifetime: a record is never forgotten early (draft-07 §2.5; contract: records kept \
         for their TTL)"
    )
}

async fn retried_late(p: &Probe) -> Verdict {
    let ran = p.ran();
    let Some(oldest) = ran.first() else {
        return Verdict::Skipped("no key ran".into());
    };
    let wait = MIN_AGE.saturating_sub(oldest.at.elapsed());
    tokio::time::sleep(wait).await;
    let alive: Vec<&Ran> = ran.iter().filter(|r| within_lifetime(p, r)).collect();
    let Some(oldest) = alive.first() else {
        return Verdict::Skipped("every key's lifetime has passed".into());
    };
    let mut late = vec![*oldest; OLDEST_RETRIES];
    let step = alive.len().div_ceil(SPREAD + 1).max(1);
    late.extend(alive.iter().skip(step).step_by(step).take(SPREAD));
    for r in &late {
        let retry = p.send(p.request(Some(&r.key))).await;
        let age = r.at.elapsed().as_secs_f32();
        match p.replay_id(&retry, &r.id) {
            Some(id) if id == r.id => continue,
            Some(id) => {
                let why = format!(
                    "ran twice: key {} ran {age:.1}s ago with id \"{}\", and its late retry \
                     ran again (id \"{id}\"): its record was forgotten",
                    r.key, r.id
                );
                return Verdict::failed(why, &[&retry]);
            }
            None => {
                let why = format!(
                    "key {} ran {age:.1}s ago with id \"{}\"; its late retry was answered {} \
                     without that id: its record was lost",
                    r.key,
                    r.id,
                    retry.status()
                );
                return Verdict::failed(why, &[&retry]);
            }
        }
    }
    Verdict::Passed(format!(
        "{} late retries of {} keys (the oldest {:.1}s old) replayed their first ids",
        late.len(),
        late.len() - OLDEST_RETRIES + 1,
        oldest.at.elapsed().as_secs_f32()
    ))
}

/// Whether `r`'s key is within its lifetime (advertised, or `--key-lifetime`) for another
/// second, the margin a late retry needs; always without one.
fn within_lifetime(p: &Probe, r: &Ran) -> bool {
    let life = r.lifetime.map(Duration::from_secs).or(p.opts.key_lifetime);
    life.is_none_or(|life| r.at + life > Instant::now() + Duration::from_secs(1))
}
