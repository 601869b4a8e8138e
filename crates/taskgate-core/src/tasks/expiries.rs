//! Every live task's ttl on one timer, not one per actor (a timer in an actor's context is a
//! boxed future with a tokio `Sleep`, about 110 bytes a task). A task puts its deadline here and
//! is told `Expire` when it comes (the Supervisor runs the timer), by whichever actor runs it
//! then (a restarted one included). A deadline left by an actor that
//! stopped first (its task settled) is dropped when it comes: it finds no actor. The
//! Supervisor's sweep stays the backstop for records no live actor holds.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The deadlines, in milliseconds since `epoch` (tokio's clock, as the actors' timers were: a
/// test's manual wall clock decides how long a ttl has left, not when it ends).
pub(crate) struct Expiries {
    pub(crate) epoch: Instant,
    due: Mutex<BTreeSet<(u64, Arc<str>)>>,
    /// Told when a deadline comes before every other (the timer sleeps until the first).
    pub(crate) sooner: Notify,
}

impl Default for Expiries {
    fn default() -> Expiries {
        Expiries { epoch: Instant::now(), due: Mutex::default(), sooner: Notify::new() }
    }
}

impl Expiries {
    /// `task` expires `after` from now (its actor's id: the entry shares it).
    pub(crate) fn add(&self, task: &Arc<str>, after: Duration) {
        let at = self.ms(self.epoch.elapsed().saturating_add(after));
        let mut due = self.due.lock();
        let first = due.first().map(|(first, _)| *first);
        due.insert((at, task.clone()));
        if first.is_none_or(|first| at < first) {
            self.sooner.notify_one();
        }
    }

    /// How many deadlines are waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.due.lock().len()
    }

    fn ms(&self, since_epoch: Duration) -> u64 {
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }

    /// The tasks whose deadline has come, taken out, and when the next one comes.
    pub(crate) fn take_due(&self) -> (Vec<Arc<str>>, Option<u64>) {
        let now = self.ms(self.epoch.elapsed());
        let mut due = self.due.lock();
        let mut taken = Vec::new();
        while let Some((at, _)) = due.first() {
            if *at > now {
                break;
            }
            taken.push(due.pop_first().expect("a first entry").1);
        }
        (taken, due.first().map(|(at, _)| *at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_come_in_order_and_are_taken_once() {
        let expiries = Expiries::default();
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "c".into());
        expiries.add(&b, Duration::from_secs(3600));
        expiries.add(&a, Duration::ZERO);
        expiries.add(&c, Duration::from_secs(7200));
        assert_eq!(expiries.len(), 3);
        let (due, next) = expiries.take_due();
        assert_eq!(due, vec![a.clone()]);
        let next = next.expect("b is next");
        assert!((3_600_000..3_601_000).contains(&next), "{next}");
        // The entry shares the task's id.
        assert_eq!(Arc::strong_count(&b), 2);
        assert_eq!(expiries.take_due().0, Vec::<Arc<str>>::new());
        assert_eq!(expiries.len(), 2);
    }

    #[test]
    fn a_deadline_beyond_any_clock_is_kept_not_wrapped() {
        let expiries = Expiries::default();
        let far: Arc<str> = "far".into();
        expiries.add(&far, Duration::MAX);
        let (due, next) = expiries.take_due();
        assert!(due.is_empty());
        assert_eq!(next, Some(u64::MAX));
    }

    #[tokio::test]
    async fn a_sooner_deadline_wakes_the_timer() {
        let expiries = Expiries::default();
        let late: Arc<str> = "late".into();
        expiries.add(&late, Duration::from_secs(3600));
        // The first deadline told the timer; so does one sooner than every other…
        expiries.sooner.notified().await;
        let soon: Arc<str> = "soon".into();
        expiries.add(&soon, Duration::from_secs(60));
        expiries.sooner.notified().await;
        // …and not one later than the first.
        expiries.add(&"later".into(), Duration::from_secs(7200));
        let woken = tokio::time::timeout(Duration::from_millis(0), expiries.sooner.notified()).await;
        assert!(woken.is_err(), "a later deadline does not wake the timer");
    }
}
