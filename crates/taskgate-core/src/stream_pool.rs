//! [`StreamPool`]: the client streams open now, gateway-wide and by tenant (`server.max_streams`
//! and each tenant's share of it). Each stream's receiver holds its place.

use std::sync::Arc;

use foldhash::HashMap;

use crate::GatewayError;

/// The gateway's pool of client streams.
#[derive(Default)]
pub(crate) struct StreamPool {
    open: parking_lot::Mutex<(usize, HashMap<Arc<str>, usize>)>,
}

/// A stream's place in the pool, given back when dropped.
pub(crate) struct StreamPlace {
    pool: Arc<StreamPool>,
    tenant: Arc<str>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut open = self.pool.open.lock();
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.tenant);
            }
        }
    }
}

impl StreamPool {
    pub(crate) fn take(
        self: &Arc<Self>,
        tenant: &Arc<str>,
        share: usize,
        max: usize,
    ) -> Result<StreamPlace, GatewayError> {
        let mut open = self.open.lock();
        if open.0 >= max {
            return Err(GatewayError::Overloaded(format!(
                "the gateway has its maximum of {max} client streams open (server.max_streams)"
            )));
        }
        let mine = open.1.get(&**tenant).copied().unwrap_or(0);
        if mine >= share {
            return Err(GatewayError::LimitExceeded(format!(
                "tenant \"{tenant}\" has its share of {share} client streams open (server.tenant_share_percent of server.max_streams)"
            )));
        }
        open.0 += 1;
        match open.1.get_mut(&**tenant) {
            Some(n) => *n += 1,
            None => {
                open.1.insert(tenant.clone(), 1);
            }
        }
        Ok(StreamPlace { pool: self.clone(), tenant: tenant.clone() })
    }
}
