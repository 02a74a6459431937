//! [`AdminStore`] for [`MemoryStore`]: a scan of the map (it holds one process's records).

use crate::admin::{same_record, AdminStore, KeyFilter, Listing};
use crate::integrity::RawRecord;
use crate::store::Result;

use super::MemoryStore;

impl AdminStore for MemoryStore {
    async fn list_key(&self, filter: &KeyFilter) -> Result<Listing> {
        let now = self.now();
        let mut records: Vec<RawRecord> = self
            .map()
            .iter()
            .filter(|(k, _)| filter.matches(k))
            .map(|(_, r)| r.clone())
            .collect();
        records.sort_by(|a, b| {
            (&a.key.route, &a.key.principal).cmp(&(&b.key.route, &b.key.principal))
        });
        Ok(Listing { now, records })
    }

    async fn delete_exact(&self, seen: &RawRecord) -> Result<bool> {
        let mut map = self.map();
        match map.get(&seen.key) {
            Some(current) if same_record(seen, current) => {
                map.remove(&seen.key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
