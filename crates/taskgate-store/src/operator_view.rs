//! What the operator's view asks of a store: every task, filtered and paged newest first; every
//! session record (shared stores); and what the store is (backend, where, leases).

use std::collections::BinaryHeap;

use crate::listing::{Page, TaskFilter};
use crate::{decode_cursor, encode_cursor, StoreError, TaskRecord};

impl TaskFilter {
    pub fn matches(&self, record: &TaskRecord) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == record.owner.tenant)
            && self.principal.as_ref().is_none_or(|p| *p == record.owner.principal)
            && self.status.is_none_or(|s| s == record.status)
            && self.upstream.as_ref().is_none_or(|u| *u == record.upstream)
    }
}

/// Position of a record in the newest-first order.
fn position(record: &TaskRecord) -> (u64, &str) {
    (record.created_at_ms, &record.id)
}

/// The newest `limit` records matching `filter` that come after `cursor` (older than it), in
/// one pass over `records` holding at most `limit + 1` of them.
pub fn newest_first(
    records: impl Iterator<Item = Result<TaskRecord, StoreError>>,
    filter: &TaskFilter,
    cursor: Option<&str>,
    limit: usize,
) -> Result<Page<TaskRecord>, StoreError> {
    struct ByPosition(TaskRecord);
    impl PartialEq for ByPosition {
        fn eq(&self, other: &Self) -> bool {
            position(&self.0) == position(&other.0)
        }
    }
    impl Eq for ByPosition {}
    impl PartialOrd for ByPosition {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for ByPosition {
        // Reversed: the heap's top is the oldest kept, the first to drop.
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            position(&other.0).cmp(&position(&self.0))
        }
    }
    let before = match cursor {
        None => None,
        Some(c) => Some(decode_cursor(c).ok_or(StoreError::BadCursor)?),
    };
    let mut kept = BinaryHeap::with_capacity(limit + 1);
    for record in records {
        let record = record?;
        if !filter.matches(&record) {
            continue;
        }
        if let Some((at, id)) = &before {
            if position(&record) >= (*at, id.as_str()) {
                continue;
            }
        }
        kept.push(ByPosition(record));
        if kept.len() > limit + 1 {
            kept.pop();
        }
    }
    let mut items: Vec<TaskRecord> = kept.into_sorted_vec().into_iter().map(|k| k.0).collect();
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = match (more, items.last()) {
        (true, Some(last)) => Some(encode_cursor(last.created_at_ms, &last.id)),
        _ => None,
    };
    Ok(Page { items, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::record;

    #[test]
    fn pages_go_from_newest_to_oldest_and_meet_every_match_once() {
        let records: Vec<TaskRecord> = (0..25)
            .map(|i| {
                let tenant = if i % 2 == 0 { "acme" } else { "other" };
                record(
                    &format!("t{i:02}"),
                    crate::Owner { tenant: tenant.into(), principal: "p".into() },
                    1_000 + (i / 3) as u64,
                    None,
                )
            })
            .collect();
        let filter = TaskFilter { tenant: Some("acme".into()), ..Default::default() };
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = newest_first(records.iter().cloned().map(Ok), &filter, cursor.as_deref(), 4).unwrap();
            assert!(page.items.len() <= 4);
            seen.extend(page.items.iter().map(|r| (r.created_at_ms, r.id.clone())));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut expected: Vec<(u64, String)> =
            records.iter().filter(|r| r.owner.tenant == "acme").map(|r| (r.created_at_ms, r.id.clone())).collect();
        expected.sort();
        expected.reverse();
        assert_eq!(seen, expected);
        assert!(matches!(newest_first(std::iter::empty(), &filter, Some("bad"), 4), Err(StoreError::BadCursor)));
    }
}
