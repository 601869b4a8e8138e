//! 2026-07-28 retries whose exchange another replica holds ([`crate::retry_relay`]): the front
//! door passes them on here and serves those the others pass on.

use super::Gateway;
use crate::retry_relay::{Forwarded, RetryHandler};
use crate::{GatewayError, Identity};

impl Gateway {
    /// Passes a retry on to `holder`, the replica holding its exchange. `Ok(None)` without a
    /// shared store (no other replica could hold it).
    pub fn forward_retry(
        &self,
        holder: &str,
        identity: &Identity,
        request: String,
    ) -> Result<Option<Forwarded>, GatewayError> {
        if !self.shares_store() {
            return Ok(None);
        }
        let context = self.shared.task_context.clone();
        let retries = context.retries.clone();
        let publish: crate::retry_relay::Publish = std::sync::Arc::new(move |event| context.tasks.publish(event));
        retries.forward(publish, holder, identity, request).map(Some).ok_or_else(|| {
            GatewayError::Overloaded(format!(
                "the retry could not be passed to the replica holding its exchange (at most {} wait here, and the \
                 store's event queue must have room); retry",
                crate::retry_relay::MAX_WAITING
            ))
        })
    }

    /// How the front door serves retries the other replicas pass on to this one.
    pub fn serve_forwarded_retries(&self, handler: RetryHandler) {
        self.shared.task_context.retries.handle_with(handler);
    }
}
