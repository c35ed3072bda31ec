//! Request collapsing: one upstream request per key at a time.
//!
//! The first miss for a key becomes the *leader* and registers a flight;
//! later misses for the key wait (at most `collapse_wait`) until the
//! leader's head is known. If it is cacheable, has a known length within
//! `max_object_bytes`, and matches the waiter's Vary-selected fields, the
//! waiter reads the leader's [`FillBuf`] from its first byte. Otherwise
//! (not cacheable, abandoned, timed out, another variant) the waiter falls
//! back to its own upstream request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, StatusCode};
use http_cache_semantics::CachePolicy;
use tokio::sync::watch;

use super::fill::FillBuf;

/// The head of a response being filled, and its buffer.
#[derive(Debug)]
pub(crate) struct Joinable {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub policy: CachePolicy,
    pub buf: Arc<FillBuf>,
}

/// What a flight's waiters see.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// The leader has not got a cacheable head yet.
    Waiting,
    /// The head is known and the body is being filled.
    Streaming(Arc<Joinable>),
    /// The leader will not fill: fall back.
    Gone,
}

type Map = Mutex<HashMap<String, Arc<watch::Sender<Phase>>>>;

/// Flights in progress, by primary key.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    map: Arc<Map>,
}

/// The leader's hold on a flight. Dropped without [`Leader::stream`]
/// (or after the fill ended), it releases the key.
#[derive(Debug)]
pub(crate) struct Leader {
    map: Arc<Map>,
    key: String,
    tx: Arc<watch::Sender<Phase>>,
}

/// Leading a new flight, or waiting on an existing one.
pub(crate) enum Role {
    Leader(Leader),
    Waiter(watch::Receiver<Phase>),
}

impl Flights {
    /// Leads `key`'s flight if there is none, else waits on it.
    pub fn lead_or_wait(&self, key: &str) -> Role {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(key) {
            return Role::Waiter(tx.subscribe());
        }
        let tx = Arc::new(watch::Sender::new(Phase::Waiting));
        map.insert(key.to_owned(), Arc::clone(&tx));
        Role::Leader(Leader {
            map: Arc::clone(&self.map),
            key: key.to_owned(),
            tx,
        })
    }

    /// Number of flights (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Leader {
    /// Lets waiters read the fill.
    pub fn stream(&self, joinable: Arc<Joinable>) {
        self.tx.send_replace(Phase::Streaming(joinable));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if matches!(*self.tx.borrow(), Phase::Waiting) {
            self.tx.send_replace(Phase::Gone);
        }
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.key).is_some_and(|t| Arc::ptr_eq(t, &self.tx)) {
            map.remove(&self.key);
        }
    }
}

/// Waits up to `limit` for the flight's head: the joinable fill, or `None`
/// to fall back.
pub(crate) async fn wait(
    mut rx: watch::Receiver<Phase>,
    limit: std::time::Duration,
) -> Option<Arc<Joinable>> {
    let phase = tokio::time::timeout(limit, rx.wait_for(|p| !matches!(p, Phase::Waiting)))
        .await
        .ok()?
        .ok()?
        .clone();
    match phase {
        Phase::Streaming(j) if !j.buf.is_abandoned() => Some(j),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_caller_waits_and_a_dropped_leader_releases() {
        let flights = Flights::default();
        let Role::Leader(leader) = flights.lead_or_wait("k") else {
            panic!("first is leader")
        };
        let Role::Waiter(rx) = flights.lead_or_wait("k") else {
            panic!("second waits")
        };
        drop(leader);
        assert_eq!(flights.len(), 0);
        assert!(wait(rx, std::time::Duration::from_secs(5)).await.is_none());
        assert!(matches!(flights.lead_or_wait("k"), Role::Leader(_)));
    }
}
