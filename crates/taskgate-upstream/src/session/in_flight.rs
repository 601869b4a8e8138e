//! The requests in flight in an upstream session during which the upstream may ask the client
//! something, kept as far as finding the sole one needs.

use parking_lot::Mutex;
use taskgate_protocol::RequestId;

/// The requests in flight that may have the upstream ask the client something meanwhile, kept
/// only as far as [`UpstreamSession::sole_call_in_flight`](super::UpstreamSession::sole_call_in_flight) needs: how many there are and the sum of their
/// (numeric) ids, which is the id itself when one is. A table of them cost every waiting call
/// (a wrapped task's, for the task's life) a slot. The gateway's ids to an upstream are
/// numbers ((`UpstreamSession::next_request_id`)); a string id is listed as it is.
#[derive(Default)]
pub(crate) struct InFlight {
    count: usize,
    /// The numeric ids' sum (wrapping: only its value with one call in flight is read).
    sum: i64,
    strings: Vec<String>,
}

impl InFlight {
    pub(crate) fn add(&mut self, id: &RequestId) {
        self.count += 1;
        match id {
            RequestId::Number(n) => self.sum = self.sum.wrapping_add(*n),
            RequestId::String(s) => self.strings.push(s.clone()),
        }
    }

    pub(crate) fn remove(&mut self, id: &RequestId) {
        self.count -= 1;
        match id {
            RequestId::Number(n) => self.sum = self.sum.wrapping_sub(*n),
            RequestId::String(s) => {
                if let Some(at) = self.strings.iter().position(|x| x == s) {
                    self.strings.swap_remove(at);
                }
                if self.strings.is_empty() {
                    self.strings = Vec::new();
                }
            }
        }
    }

    pub(crate) fn sole(&self) -> Option<RequestId> {
        match (self.count, self.strings.first()) {
            (1, Some(s)) => Some(RequestId::String(s.clone())),
            (1, None) => Some(RequestId::Number(self.sum)),
            _ => None,
        }
    }
}

/// Keeps a request in the session's calls in flight while it is in flight. (It borrows the id the
/// call holds: a waiting call keeps one copy.)
pub(crate) struct CallGuard<'a> {
    calls: &'a Mutex<InFlight>,
    id: Option<&'a RequestId>,
}

impl<'a> CallGuard<'a> {
    pub(crate) fn new(calls: &'a Mutex<InFlight>, id: &'a RequestId, method: &str) -> CallGuard<'a> {
        let asks = taskgate_protocol::method::row(method).is_some_and(|row| row.asks_client);
        if asks {
            calls.lock().add(id);
        }
        CallGuard { calls, id: asks.then_some(id) }
    }
}

impl CallGuard<'_> {
    /// Hands the call's place among those in flight to a a waiting call: whether it has one.
    pub(crate) fn keep(mut self) -> bool {
        self.id.take().is_some()
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.calls.lock().remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sole_call_in_flight_is_known_from_a_count_and_a_sum() {
        let mut calls = InFlight::default();
        let (a, b, c) = (RequestId::Number(7), RequestId::Number(i64::MAX), RequestId::String("s".into()));
        assert_eq!(calls.sole(), None);
        calls.add(&a);
        assert_eq!(calls.sole(), Some(a.clone()));
        calls.add(&b);
        calls.add(&c);
        assert_eq!(calls.sole(), None);
        calls.remove(&a);
        calls.remove(&c);
        // The sum wrapped past i64::MAX on the way and came back.
        assert_eq!(calls.sole(), Some(b.clone()));
        calls.add(&c);
        calls.remove(&b);
        assert_eq!(calls.sole(), Some(c.clone()));
        calls.remove(&c);
        assert_eq!((calls.sole(), calls.count, calls.sum, calls.strings.capacity()), (None, 0, 0, 0));
    }
}
