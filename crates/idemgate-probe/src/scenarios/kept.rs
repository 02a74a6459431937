//! Records kept: at the end of the run, the keys that ran earlier still replay their first
//! answer. An API that forgets a record early (a cache that evicts it, a record deleted
//! after a few replays, a lifetime shorter than the one advertised) runs a late retry
//! again (README "The contract": a record is kept for its TTL; draft-07 §2.5).

use std::time::Duration;

use super::{scenario, Scenario};
use crate::probe::{Probe, Ran};
use crate::report::Verdict;

/// How many times the run's oldest key is retried (a record deleted after a few replays).
const OLDEST_RETRIES: usize = 3;

/// How many other keys are retried, spread over the run.
const SPREAD: usize = 5;

/// The youngest the oldest key may be when retried (unless its lifetime is shorter): a
/// record forgotten after a second or two is forgotten by then.
const MIN_AGE: Duration = Duration::from_secs(3);

pub(crate) fn kept() -> Scenario {
    scenario!(
        "records-kept",
        Required,
        OLDEST_RETRIES + SPREAD + 1,
        retried_late,
        "Near the end of the run (before key-lifetime), keys that ran earlier (the oldest \
         retried three times, others spread over the run) still replay their first id, \
         within their advertised lifetime; with none left within it, a key of its own is \
         retried late in its lifetime: a record is never forgotten early (draft-07 §2.5; contract: \
         records kept for their TTL)"
    )
}

async fn retried_late(p: &Probe) -> Verdict {
    let mut ran: Vec<Ran> = p.ran().into_iter().filter(|r| alive(p, r)).collect();
    // No key of the run still within its lifetime (a short one): a key of its own,
    // retried late in its lifetime.
    if ran.is_empty() {
        let key = p.key();
        if let Err(v) = super::first(p, &key).await {
            return v;
        }
        ran = p.ran().into_iter().filter(|r| r.key == key).collect();
    }
    let Some(oldest) = ran.first().cloned() else {
        return Verdict::Skipped("no key ran".into());
    };
    let life = lifetime(p, &oldest).unwrap_or(Duration::MAX);
    let late = MIN_AGE.min(life.saturating_sub(life / 20 + Duration::from_millis(500)));
    tokio::time::sleep(late.saturating_sub(oldest.at.elapsed())).await;
    let mut late = vec![&oldest; OLDEST_RETRIES];
    let step = ran.len().div_ceil(SPREAD + 1).max(1);
    late.extend(ran.iter().skip(step).step_by(step).take(SPREAD));
    for r in &late {
        if let Err(v) = retried(p, r).await {
            return v;
        }
    }
    Verdict::Passed(format!(
        "{} late retries of {} keys (the oldest {:.1}s old) replayed their first ids",
        late.len(),
        late.len() - OLDEST_RETRIES + 1,
        oldest.at.elapsed().as_secs_f32()
    ))
}

/// `r`'s key retried: it must replay its first id.
async fn retried(p: &Probe, r: &Ran) -> Result<(), Verdict> {
    let retry = p.send(p.request(Some(&r.key))).await;
    let age = r.at.elapsed().as_secs_f32();
    match p.replay_id(&retry, &r.id) {
        Some(id) if id == r.id => Ok(()),
        Some(id) => Err(Verdict::failed(
            format!(
                "ran twice: key {} ran {age:.1}s ago with id \"{}\", and its late retry ran \
                 again (id \"{id}\"): its record was forgotten",
                r.key, r.id
            ),
            &[&retry],
        )),
        None => Err(Verdict::failed(
            format!(
                "key {} ran {age:.1}s ago with id \"{}\"; its late retry was answered {} \
                 without that id: its record was lost",
                r.key,
                r.id,
                retry.status()
            ),
            &[&retry],
        )),
    }
}

/// `r`'s key lifetime: advertised, or `--key-lifetime`.
fn lifetime(p: &Probe, r: &Ran) -> Option<Duration> {
    r.lifetime.map(Duration::from_secs).or(p.opts.key_lifetime)
}

/// Whether `r`'s key is still within its lifetime, with the margin a late retry needs (a
/// twentieth of it, at least 500 ms); always without one.
fn alive(p: &Probe, r: &Ran) -> bool {
    lifetime(p, r).is_none_or(|life| {
        // Compared as durations: an advertised lifetime of u64::MAX seconds does not
        // overflow an instant.
        r.at.elapsed() + life / 20 + Duration::from_millis(500) < life
    })
}
