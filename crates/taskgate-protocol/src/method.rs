//! Every method a client may send the gateway, once, with what the rest of the gateway needs to
//! know of it: the revisions that have it and the file that serves it at each, whether its
//! reply may stream, whether the upstream may ask the client something while it runs, whether a
//! 2026-07-28 request for it is forwarded to one upstream as is, and whether it counts as
//! polling. The front doors dispatch by [`Method`], the metrics label requests by its name, the
//! upstream session's bookkeeping and the error texts read the [`Row`].
//!
//! Adding a method is one row here (and its [`Method`] variant) and the handler the row names.

/// A method a client may send, in the order of [`TABLE`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Method {
    Initialize,
    Ping,
    ToolsList,
    ToolsCall,
    TasksGet,
    TasksResult,
    TasksList,
    TasksCancel,
    TasksUpdate,
    ResourcesList,
    ResourcesTemplatesList,
    ResourcesRead,
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    PromptsList,
    PromptsGet,
    CompletionComplete,
    LoggingSetLevel,
    ServerDiscover,
    SubscriptionsListen,
    RootsList,
}

/// What the gateway knows of one method.
#[derive(Debug)]
pub struct Row {
    pub method: Method,
    /// Its name on the wire, and its `method` label in the metrics.
    pub name: &'static str,
    /// The file (from the repository's root) whose code answers it in a 2025-11-25 session;
    /// `None`: that revision's clients get -32601 for it.
    pub at_2025: Option<&'static str>,
    /// The file whose code answers it as a 2026-07-28 request; `None`: -32601 (and 404).
    pub at_2026: Option<&'static str>,
    /// Its reply may come after progress and requests relayed from the upstream, or after a
    /// long wait: a 2025-11-25 client that accepts SSE gets it as a stream.
    pub streams: bool,
    /// While it runs, the upstream may send requests to the client (elicitation, sampling, roots)
    /// tied to it: the upstream session keeps it among the calls that may be asked for.
    pub asks_client: bool,
    /// A 2026-07-28 upstream may answer it with `input_required` (basic/patterns/mrtr
    /// "Supported Requests"): the only methods a multi round-trip request may be.
    pub input_required: bool,
    /// A 2026-07-28 request for it goes to one upstream as it came (through a session pooled per
    /// identity), not answered by the gateway itself.
    pub forwarded: bool,
    /// It counts in the polling buckets of the tenant's limits.
    pub poll: bool,
}

const SESSION: &str = "crates/taskgate-core/src/session/mod.rs";
const TOOLS: &str = "crates/taskgate-core/src/session/tools.rs";
const TASKS: &str = "crates/taskgate-core/src/session/task_calls.rs";
const OFFERINGS: &str = "crates/taskgate-core/src/session/offerings.rs";
const OPEN: &str = "crates/taskgate-core/src/gateway/client_sessions.rs";
const FRONT_2026: &str = "crates/taskgate-http/src/revision_2026/mod.rs";
const TASKS_2026: &str = "crates/taskgate-http/src/revision_2026/tasks.rs";
const LISTEN_2026: &str = "crates/taskgate-http/src/revision_2026/listen.rs";

/// A row with every flag off.
const fn plain(
    method: Method,
    name: &'static str,
    at_2025: Option<&'static str>,
    at_2026: Option<&'static str>,
) -> Row {
    Row {
        method,
        name,
        at_2025,
        at_2026,
        streams: false,
        asks_client: false,
        input_required: false,
        forwarded: false,
        poll: false,
    }
}

/// Every method, in the order of [`Method`].
pub static TABLE: [Row; 21] = [
    plain(Method::Initialize, "initialize", Some(OPEN), None),
    plain(Method::Ping, "ping", Some(SESSION), None),
    Row { forwarded: true, ..plain(Method::ToolsList, "tools/list", Some(TOOLS), Some(TOOLS)) },
    Row {
        streams: true,
        asks_client: true,
        input_required: true,
        forwarded: true,
        ..plain(Method::ToolsCall, "tools/call", Some(TOOLS), Some(TOOLS))
    },
    Row { poll: true, ..plain(Method::TasksGet, "tasks/get", Some(TASKS), Some(TASKS_2026)) },
    Row { streams: true, asks_client: true, ..plain(Method::TasksResult, "tasks/result", Some(TASKS), None) },
    Row { poll: true, ..plain(Method::TasksList, "tasks/list", Some(TASKS), None) },
    plain(Method::TasksCancel, "tasks/cancel", Some(TASKS), Some(TASKS_2026)),
    plain(Method::TasksUpdate, "tasks/update", None, Some(TASKS_2026)),
    Row { forwarded: true, ..plain(Method::ResourcesList, "resources/list", Some(OFFERINGS), Some(OFFERINGS)) },
    Row {
        forwarded: true,
        ..plain(Method::ResourcesTemplatesList, "resources/templates/list", Some(OFFERINGS), Some(OFFERINGS))
    },
    Row {
        streams: true,
        asks_client: true,
        input_required: true,
        forwarded: true,
        ..plain(Method::ResourcesRead, "resources/read", Some(OFFERINGS), Some(OFFERINGS))
    },
    Row { streams: true, ..plain(Method::ResourcesSubscribe, "resources/subscribe", Some(OFFERINGS), None) },
    Row { streams: true, ..plain(Method::ResourcesUnsubscribe, "resources/unsubscribe", Some(OFFERINGS), None) },
    Row { forwarded: true, ..plain(Method::PromptsList, "prompts/list", Some(OFFERINGS), Some(OFFERINGS)) },
    Row {
        streams: true,
        asks_client: true,
        input_required: true,
        forwarded: true,
        ..plain(Method::PromptsGet, "prompts/get", Some(OFFERINGS), Some(OFFERINGS))
    },
    Row {
        streams: true,
        asks_client: true,
        forwarded: true,
        ..plain(Method::CompletionComplete, "completion/complete", Some(OFFERINGS), Some(OFFERINGS))
    },
    plain(Method::LoggingSetLevel, "logging/setLevel", Some(OFFERINGS), None),
    plain(Method::ServerDiscover, "server/discover", None, Some(FRONT_2026)),
    plain(Method::SubscriptionsListen, "subscriptions/listen", None, Some(LISTEN_2026)),
    // A request a client answers: counted under its own label should a client send it, and
    // answered -32601 at both revisions.
    plain(Method::RootsList, "roots/list", None, None),
];

impl Method {
    /// The method of that name, if the table has it.
    #[inline]
    pub fn named(name: &str) -> Option<Method> {
        TABLE.iter().find(|row| row.name == name).map(|row| row.method)
    }

    /// Its row of [`TABLE`].
    #[inline]
    pub fn row(self) -> &'static Row {
        &TABLE[self as usize]
    }

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        self.row().name
    }
}

/// The row of the method of that name, if the table has it.
#[inline]
pub fn row(name: &str) -> Option<&'static Row> {
    TABLE.iter().find(|row| row.name == name)
}

/// The names of the methods a revision serves, for error texts: `"initialize, ping, …"`.
pub fn served_at_2025() -> String {
    TABLE.iter().filter(|row| row.at_2025.is_some()).map(|row| row.name).collect::<Vec<_>>().join(", ")
}

/// The names of the 2026-07-28 methods, for error texts.
pub fn served_at_2026() -> String {
    TABLE.iter().filter(|row| row.at_2026.is_some()).map(|row| row.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{mcp, revision_2026};

    #[test]
    fn each_row_is_at_its_methods_place_and_each_name_once() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.method as usize, i, "{} is out of place", row.name);
            assert_eq!(Method::named(row.name), Some(row.method));
            assert_eq!(TABLE.iter().filter(|r| r.name == row.name).count(), 1, "{} twice", row.name);
        }
        assert_eq!(Method::named("tools/call2"), None);
        assert_eq!(Method::named(""), None);
    }

    #[test]
    fn the_names_are_the_protocols() {
        use mcp::methods as m;
        for name in [
            m::INITIALIZE,
            m::PING,
            m::TOOLS_LIST,
            m::TOOLS_CALL,
            m::TASKS_GET,
            m::TASKS_RESULT,
            m::TASKS_LIST,
            m::TASKS_CANCEL,
            revision_2026::methods::TASKS_UPDATE,
            m::RESOURCES_LIST,
            m::RESOURCES_TEMPLATES_LIST,
            m::RESOURCES_READ,
            m::RESOURCES_SUBSCRIBE,
            m::RESOURCES_UNSUBSCRIBE,
            m::PROMPTS_LIST,
            m::PROMPTS_GET,
            m::COMPLETION_COMPLETE,
            m::LOGGING_SET_LEVEL,
            revision_2026::methods::SERVER_DISCOVER,
            revision_2026::methods::SUBSCRIPTIONS_LISTEN,
            m::ROOTS_LIST,
        ] {
            assert!(Method::named(name).is_some(), "{name} is not in the table");
        }
    }

    #[test]
    fn every_handler_named_exists_and_flags_agree_with_the_revisions() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        for row in &TABLE {
            for file in [row.at_2025, row.at_2026].into_iter().flatten() {
                assert!(std::path::Path::new(root).join(file).is_file(), "{}: {file} does not exist", row.name);
            }
            // What only one revision does is flagged only for a method that revision has.
            if row.forwarded || row.input_required {
                assert!(row.at_2026.is_some(), "{}", row.name);
            }
            if row.streams {
                assert!(row.at_2025.is_some(), "{}", row.name);
            }
            if row.input_required {
                assert!(row.asks_client, "{}", row.name);
            }
        }
        assert_eq!(
            served_at_2026(),
            "tools/list, tools/call, tasks/get, tasks/cancel, tasks/update, resources/list, resources/templates/list, \
             resources/read, prompts/list, prompts/get, completion/complete, server/discover, subscriptions/listen"
        );
    }
}
