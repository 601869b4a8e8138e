//! Client requests by tenant and MCP method: how many arrived, how long each took until its
//! response was sent (the end of its stream, for a streamed response), and how many ended in
//! an error (a JSON-RPC error or an HTTP refusal). The method label takes the methods of both
//! revisions and `other`, so a client cannot grow the label set; tenants come from the
//! configuration.
//!
//! Each request looks its series up once, in a table per tenant, and holds them until it ends.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use foldhash::HashMap;
use parking_lot::RwLock;
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec};
use taskgate_protocol::method::{self, Method};

/// The number of values of the `method` label: the methods of the table, then `other`, so a
/// client cannot grow the label set.
const LABELS: usize = method::TABLE.len() + 1;

/// Where `method` is among the label values; anything unknown is `other`.
fn method_index(method: &str) -> usize {
    Method::named(method).map_or(LABELS - 1, |m| m as usize)
}

/// The label value at `index`.
fn method_label(index: usize) -> &'static str {
    method::TABLE.get(index).map_or("other", |row| row.name)
}

/// One tenant's and method's series.
struct Series {
    count: IntCounter,
    errors: IntCounter,
    duration: Histogram,
}

type TenantSeries = Arc<[OnceLock<Series>]>;

/// The request metrics and the table of their series.
pub struct RequestMetrics {
    pub(super) count: IntCounterVec,
    pub(super) errors: IntCounterVec,
    pub(super) duration: HistogramVec,
    tenants: RwLock<HashMap<String, TenantSeries>>,
}

impl RequestMetrics {
    pub fn new(count: IntCounterVec, errors: IntCounterVec, duration: HistogramVec) -> RequestMetrics {
        RequestMetrics { count, errors, duration, tenants: Default::default() }
    }

    fn tenant(&self, tenant: &str) -> TenantSeries {
        if let Some(series) = self.tenants.read().get(tenant) {
            return series.clone();
        }
        let mut tenants = self.tenants.write();
        let series = tenants.entry(tenant.to_owned()).or_insert_with(|| (0..LABELS).map(|_| OnceLock::new()).collect());
        series.clone()
    }

    /// Creates a tenant's `requests_total` and `request_errors_total` series at 0 for the
    /// methods every client sends, so a fresh scrape has them (the histograms come with a
    /// tenant's first request of each method).
    pub fn initialise(&self, tenant: &str) {
        for method in [Method::Initialize, Method::ToolsList, Method::ToolsCall].map(Method::name) {
            self.count.with_label_values(&[tenant, method]);
            self.errors.with_label_values(&[tenant, method]);
        }
    }

    /// Counts a request that arrived, and measures it until the meter is dropped.
    pub fn meter(&self, tenant: &str, method: &str) -> RequestMeter {
        let tenant_series = self.tenant(tenant);
        let index = method_index(method);
        let series = tenant_series[index].get_or_init(|| {
            let labels = [tenant, method_label(index)];
            Series {
                count: self.count.with_label_values(&labels),
                errors: self.errors.with_label_values(&labels),
                duration: self.duration.with_label_values(&labels),
            }
        });
        series.count.inc();
        RequestMeter { series: tenant_series, index, start: Instant::now(), failed: false }
    }
}

/// One request being measured: its duration is recorded when it is dropped (its response
/// sent, or its client gone), with an error when [`RequestMeter::fail`] was called.
pub struct RequestMeter {
    series: TenantSeries,
    index: usize,
    start: Instant,
    failed: bool,
}

impl RequestMeter {
    /// The request ended in an error.
    pub fn fail(&mut self) {
        self.failed = true;
    }
}

impl Drop for RequestMeter {
    fn drop(&mut self) {
        if let Some(series) = self.series[self.index].get() {
            series.duration.observe(self.start.elapsed().as_secs_f64());
            if self.failed {
                series.errors.inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(method_index("tools/call")), "tools/call");
        assert_eq!(method_label(method_index("x/anything")), "other");
        assert_eq!(method_label(method_index("other")), "other");
    }
}
