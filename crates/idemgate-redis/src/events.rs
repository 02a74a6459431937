//! Key events between processes ([`idemgate_core::events`]) through Redis pub/sub: outcome
//! writers `PUBLISH` on the channel `<key prefix>events`, and one subscribed connection per
//! process (to the one server, or to the primary the Sentinels name, found again after a
//! failover) hands them to the waiters. After the subscription broke, every waited key is
//! read again ([`EventSink::missed`]). A store from [`crate::RedisStore::from_connection_manager`]
//! or on a cluster sends its events but does not subscribe: its waiters poll.

use std::time::Duration;

use futures_util::StreamExt;
use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::integrity::response_checksum;
use idemgate_core::store::OutcomeWrite;
use idemgate_core::{Lease, StoreError};
use redis::ScriptInvocation;

use crate::error::classify;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;
use crate::wait::Nodes;

/// Wait before subscribing again after the subscription failed.
const RECONNECT: Duration = Duration::from_secs(1);
/// How often the subscriber checks, while nothing comes, whether its waiters still live.
const CHECK_LIVE: Duration = Duration::from_secs(5);

impl RedisStore {
    /// The channel of this store's events.
    pub(crate) fn channel(&self) -> String {
        format!("{}events", self.key_prefix())
    }

    /// `PUBLISH` the event (after the write it tells of landed).
    pub(crate) async fn publish(&self, event: &KeyEvent) -> Result<(), StoreError> {
        let mut conn = self.conn();
        redis::cmd("PUBLISH")
            .arg(self.channel())
            .arg(event.encode())
            .query_async::<i64>(&mut conn)
            .await
            .map_err(classify)?;
        Ok(())
    }

    /// The script of `write` on `lease`'s record, with its arguments.
    pub(crate) fn outcome_invocation(
        &self,
        lease: &Lease,
        write: OutcomeWrite<'_>,
    ) -> ScriptInvocation<'static> {
        match write {
            OutcomeWrite::Complete(response) => {
                let mut inv = self.lease_invocation(&SCRIPTS.complete, lease);
                inv.arg(response.status)
                    .arg(response.encode_headers())
                    .arg(response.body.as_ref())
                    .arg(if response.replayable { "1" } else { "0" })
                    .arg(&response_checksum(&lease.key, response)[..])
                    .arg(self.confirm())
                    .arg(
                        response
                            .sealed_by
                            .map_or_else(String::new, |id| id.to_string()),
                    );
                inv
            }
            OutcomeWrite::Fail => {
                let mut inv = self.lease_invocation(&SCRIPTS.fail, lease);
                inv.arg(self.confirm());
                inv
            }
            OutcomeWrite::Release => {
                let mut inv = self.lease_invocation(&SCRIPTS.release, lease);
                inv.arg(self.confirm());
                inv
            }
        }
    }

    /// [`IdempotencyStore::write_announced`](idemgate_core::IdempotencyStore::write_announced):
    /// the outcome script `PUBLISH`es the event itself when it writes (`announce()` in
    /// `common.lua`): one round trip. Without a subscription (a cluster, a caller's
    /// connection manager) the write, then a `PUBLISH`.
    pub(crate) async fn write_with_event(
        &self,
        lease: &Lease,
        write: OutcomeWrite<'_>,
        event: &KeyEvent,
    ) -> Result<(), StoreError> {
        let op = write.name();
        let mut inv = self.outcome_invocation(lease, write);
        if self.events.is_some() {
            inv.arg(self.channel()).arg(event.encode());
            return self.run_outcome(op, &inv).await;
        }
        self.run_outcome(op, &inv).await?;
        if let Err(e) = self.publish(event).await {
            tracing::warn!(error = %e, "key event not sent to other processes");
        }
        Ok(())
    }

    /// Subscribes on `nodes` until `sink` is no longer live (see the module).
    pub(crate) async fn subscribe(&self, nodes: &Nodes, sink: EventSink) {
        let channel = self.channel();
        while sink.is_live() {
            match subscribed(nodes, &channel).await {
                Ok(pubsub) => {
                    sink.missed();
                    relay(pubsub, &sink).await;
                }
                Err(e) => tracing::warn!(error = %e, "key events: cannot subscribe; waiters poll"),
            }
            tokio::time::sleep(RECONNECT).await;
        }
    }
}

async fn subscribed(nodes: &Nodes, channel: &str) -> redis::RedisResult<redis::aio::PubSub> {
    let client = match nodes {
        Nodes::Single(client) => client.clone(),
        Nodes::Sentinel(sentinel) => sentinel.primary().await?.client,
    };
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

/// Hands every message to `sink` until the subscription ends or `sink` dies.
async fn relay(mut pubsub: redis::aio::PubSub, sink: &EventSink) {
    let mut messages = pubsub.on_message();
    loop {
        match tokio::time::timeout(CHECK_LIVE, messages.next()).await {
            Err(_) if sink.is_live() => {}
            Err(_) | Ok(None) => return,
            Ok(Some(message)) => {
                let event = message.get_payload::<String>().ok();
                match event.as_deref().and_then(KeyEvent::decode) {
                    Some(event) if !sink.deliver(event) => return,
                    Some(_) => {}
                    None => tracing::debug!("key events: not an event"),
                }
            }
        }
    }
}
