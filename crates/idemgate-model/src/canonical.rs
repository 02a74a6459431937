//! One representative of states alike but for names: clients and gateways are
//! interchangeable (each does what any other may), attempts are a set, and tokens are
//! compared only for equality. Renaming them consistently keeps every property, so the
//! checker stores one state where it met up to 2! × 2! × (tokens)! of them.

use std::collections::BTreeMap;

use crate::state::{Attempt, Phase, State};

/// Puts `s` in its canonical form: clients, then gateways, in a sorted order, attempts
/// sorted, tokens numbered by first appearance.
pub(crate) fn canonical(s: &mut State) {
    clients(s);
    gateways(s);
    s.attempts.sort();
    tokens(s);
    s.attempts.sort();
}

/// What an index's attempts look like, whoever holds the other side.
fn phases(s: &State, of: impl Fn(&Attempt) -> bool) -> Vec<(Phase, bool)> {
    let mut phases: Vec<(Phase, bool)> = (s.attempts.iter())
        .filter(|a| of(a))
        .map(|a| (a.phase, a.client.is_some()))
        .collect();
    phases.sort();
    phases
}

/// The permutation that sorts `keys`: `order[new] = old`, and its inverse.
fn permutation<K: Ord>(keys: Vec<K>) -> (Vec<usize>, Vec<u8>) {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|a, b| keys[*a].cmp(&keys[*b]));
    let mut new_of = vec![0u8; keys.len()];
    for (new, old) in order.iter().enumerate() {
        new_of[*old] = new as u8;
    }
    (order, new_of)
}

fn clients(s: &mut State) {
    let keys = (0..s.clients.len())
        .map(|c| (s.clients[c], phases(s, |a| a.client == Some(c as u8))))
        .collect();
    let (order, new_of) = permutation(keys);
    s.clients = order.iter().map(|old| s.clients[*old]).collect();
    for a in &mut s.attempts {
        a.client = a.client.map(|c| new_of[usize::from(c)]);
    }
}

fn gateways(s: &mut State) {
    let keys = (0..s.gateways.len())
        .map(|g| {
            let held = phases(s, |a| a.gateway == g as u8);
            (s.gateways[g].clone(), held)
        })
        .collect();
    let (order, new_of) = permutation(keys);
    s.gateways = order.iter().map(|old| s.gateways[*old].clone()).collect();
    for a in &mut s.attempts {
        a.gateway = new_of[usize::from(a.gateway)];
    }
}

/// Tokens renumbered 1.. in the order first met (the primary, the standby, attempts,
/// journals); the next token handed out follows them.
fn tokens(s: &mut State) {
    let mut map: BTreeMap<u8, u8> = BTreeMap::new();
    let mut name = |t: &mut u8| {
        let next = map.len() as u8 + 1;
        *t = *map.entry(*t).or_insert(next);
    };
    for r in [&mut s.primary, &mut s.standby].into_iter().flatten() {
        name(&mut r.token);
    }
    for a in &mut s.attempts {
        match &mut a.phase {
            Phase::Begin | Phase::Waiting { .. } | Phase::WaiterBegin { .. } => {}
            Phase::TakeOver(r) => name(&mut r.token),
            Phase::Held { lease, .. } | Phase::Outcome { lease, .. } | Phase::Reclaim(lease) => {
                name(&mut lease.token)
            }
        }
    }
    for gw in &mut s.gateways {
        for (e, _) in &mut gw.journal {
            name(&mut e.record.token);
        }
    }
    s.tokens = map.len() as u8;
}
