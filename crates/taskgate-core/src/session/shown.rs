//! [`Shown`]: which tools a session shows its client: the endpoint's (a profile's, in search
//! mode or not) and, in search mode, those the client activated (`use_tools`).

use std::collections::BTreeSet;

use crate::tenants::profiles::Endpoint;

/// Tools one session may activate, at most (its record keeps as many).
pub(crate) use taskgate_store::MAX_ACTIVATED;

#[derive(Default)]
pub(crate) struct Shown {
    /// The endpoint the session was opened at.
    pub endpoint: Endpoint,
    /// The tools activated (the gateway's names), in search mode.
    activated: BTreeSet<String>,
}

impl Shown {
    pub fn new(endpoint: Endpoint) -> Shown {
        Shown { endpoint, activated: BTreeSet::new() }
    }

    /// Activates `names` (the gateway's); how many were new. Past [`MAX_ACTIVATED`], the rest
    /// are refused (`Err` with how many were new before).
    pub fn activate<'a>(&mut self, names: impl Iterator<Item = &'a str>) -> Result<usize, usize> {
        let mut added = 0;
        for name in names {
            if self.activated.contains(name) {
                continue;
            }
            if self.activated.len() >= MAX_ACTIVATED {
                return Err(added);
            }
            self.activated.insert(name.to_owned());
            added += 1;
        }
        Ok(added)
    }

    /// Whether the client activated the tool the gateway names `name`.
    pub fn is_activated(&self, name: &str) -> bool {
        self.activated.contains(name)
    }

    /// The activated tools' names (the gateway's).
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.activated.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_counted_once_and_bounded() {
        let mut shown = Shown::default();
        assert_eq!(shown.activate(["a", "b", "a"].into_iter()), Ok(2));
        assert_eq!(shown.activate(["b"].into_iter()), Ok(0));
        assert!(shown.is_activated("a") && !shown.is_activated("c"));
        let many: Vec<String> = (0..MAX_ACTIVATED).map(|i| format!("t{i}")).collect();
        assert_eq!(shown.activate(many.iter().map(String::as_str)), Err(MAX_ACTIVATED - 2));
        assert_eq!(shown.names().count(), MAX_ACTIVATED);
    }
}
