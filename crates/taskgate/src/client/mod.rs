//! `taskgate call` and `taskgate tasks`: a command-line MCP client for the gateway or any MCP
//! server over Streamable HTTP, of either revision (2025-11-25 sessions, 2026-07-28 stateless
//! requests), with a bearer token or OAuth client credentials.
//!
//! It is the gateway's own client of upstreams ([`taskgate_upstream::Connector`]): the same
//! revision probe and translation, the same token handling, the same streams.
//!
//! - [`call`]: `taskgate call URL TOOL --arg k=v`, plain or as a task (`--task`); Ctrl-C cancels.
//! - [`tasks`]: `taskgate tasks list|get|result|cancel`.
//! - [`progress`]: the progress bar (a terminal) or progress lines (anything else).
//! - [`discover`]: the token endpoint found from the server's protected resource metadata.

pub mod call;
mod discover;
mod progress;
pub mod tasks;

use anyhow::Context;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};

use taskgate_config::{UpstreamConfig, UpstreamGrant, UpstreamOAuth, UpstreamProtocol};
use taskgate_upstream::{ClientIdentity, Connector, EventReceiver, UpstreamError, UpstreamSession};

/// What every client command takes: where, how to sign in, which revision.
#[derive(clap::Args, Clone)]
pub struct ServerArgs {
    /// The MCP endpoint, e.g. http://127.0.0.1:8080/mcp.
    pub url: String,
    /// A bearer token (an API key or an access token); also TASKGATE_TOKEN.
    #[arg(long, env = "TASKGATE_TOKEN", hide_env_values = true)]
    pub bearer: Option<String>,
    /// OAuth client credentials: the client id (the secret from --client-secret-env).
    #[arg(long, conflicts_with = "bearer")]
    pub client_id: Option<String>,
    /// The environment variable holding the client secret.
    #[arg(long, default_value = "TASKGATE_CLIENT_SECRET")]
    pub client_secret_env: String,
    /// The authorization server's token endpoint.
    #[arg(long, requires = "client_id", conflicts_with = "issuer")]
    pub token_url: Option<String>,
    /// The authorization server trusted with the client secret (its token endpoint is read
    /// from its metadata). Needed, or --token-url, unless the server is on this machine (then
    /// the authorization server its protected resource metadata names).
    #[arg(long, requires = "client_id")]
    pub issuer: Option<String>,
    /// The scope to ask for.
    #[arg(long, requires = "client_id")]
    pub scope: Option<String>,
    /// The revision to speak: auto (ask the server), 2025-11-25 or 2026-07-28.
    #[arg(long, default_value = "auto", value_parser = revision)]
    pub revision: UpstreamProtocol,
    /// Give up on a request after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
}

fn revision(text: &str) -> Result<UpstreamProtocol, String> {
    match text {
        "auto" => Ok(UpstreamProtocol::Auto),
        "2025-11-25" => Ok(UpstreamProtocol::V2025),
        "2026-07-28" => Ok(UpstreamProtocol::V2026),
        other => Err(format!("{other:?}: auto, 2025-11-25 or 2026-07-28")),
    }
}

/// A connection to the server: its session (made at the first request) and what the server
/// sends on its own.
pub struct Server {
    pub session: UpstreamSession,
    pub events: EventReceiver,
    pub json: bool,
    _connector: Connector,
}

/// Connects as `args` says (nothing is sent yet).
pub async fn connect(args: &ServerArgs) -> anyhow::Result<Server> {
    let mut config = UpstreamConfig::http("server", &args.url);
    config.protocol = args.revision;
    config.timeout_secs = args.timeout;
    config.prefix = false;
    CREDENTIALS_GIVEN.store(args.bearer.is_some() || args.client_id.is_some(), Ordering::Relaxed);
    if let Some(token) = &args.bearer {
        config.headers.insert("Authorization".into(), format!("Bearer {token}"));
    }
    if let Some(client_id) = &args.client_id {
        // The access token goes to the server: over TLS, or to this machine.
        discover::secure(&args.url).context("the server's URL (an access token is sent there)")?;
        let secret = std::env::var(&args.client_secret_env)
            .with_context(|| format!("the client secret: set {}", args.client_secret_env))?;
        let token_url = discover::token_endpoint(&args.url, args.issuer.as_deref(), args.token_url.as_deref()).await?;
        // No --scope: the scopes the server's protected resource metadata lists (MCP
        // authorization, "Scope Selection Strategy").
        let scope = match &args.scope {
            Some(scope) => Some(scope.clone()),
            None => discover::scopes_supported(&args.url).await,
        };
        config.oauth = Some(UpstreamOAuth {
            token_url,
            client_id: client_id.clone(),
            client_secret_env: args.client_secret_env.clone(),
            grant: UpstreamGrant::ClientCredentials,
            scope,
            resource: None,
            issuer: None,
            audience: None,
            max_cached_tokens: 1,
            client_secret: Some(secret),
        });
    }
    let connector = Connector::new(config);
    let (events_tx, events) = taskgate_upstream::event_channel(256);
    let identity = ClientIdentity {
        capabilities: json!({}),
        client_info: json!({"name": "taskgate-cli", "version": env!("CARGO_PKG_VERSION")}),
        speaks_2025: false,
    };
    let session = connector.open(identity, events_tx);
    Ok(Server { session, events, json: args.json, _connector: connector })
}

/// Whether credentials were given (`--bearer`, `--client-id`): a refusal is then about them.
static CREDENTIALS_GIVEN: AtomicBool = AtomicBool::new(false);

/// Whether an upstream error is the server refusing the request's credentials.
fn refused(reason: &str) -> bool {
    reason.contains("it refused the")
        || reason.contains("requires authorization")
        || reason.contains("HTTP 401")
        || reason.contains("HTTP 403")
}

/// What went wrong, as the person at the terminal should read it.
pub fn explain(e: UpstreamError) -> anyhow::Error {
    match e {
        UpstreamError::Rpc { error, .. } => {
            anyhow::anyhow!("the server answered with an error {}: {}", error.code, printable(&error.message))
        }
        // Credentials were given and refused: what the server says is wrong with them.
        UpstreamError::Unavailable { reason, .. } if refused(&reason) && CREDENTIALS_GIVEN.load(Ordering::Relaxed) => {
            // "… (401; it says: X; it asks: Y)" or "… (401; it says: X)": X.
            let said = reason.split_once("; it says: ").map(|(_, said)| match said.rsplit_once("; it asks: ") {
                Some((said, _)) => said,
                None => said.strip_suffix(')').unwrap_or(said),
            });
            match said {
                Some(said) => anyhow::anyhow!("the server refused the credentials: {}", printable(said)),
                None => anyhow::anyhow!("the server refused the credentials ({reason})"),
            }
        }
        UpstreamError::Unavailable { reason, .. } if reason.contains("cannot get an access token") => {
            if reason.contains("invalid_client") {
                anyhow::anyhow!(
                    "the authorization server refused the client id or its secret (invalid_client): {reason}"
                )
            } else {
                anyhow::anyhow!("no access token: {reason}")
            }
        }
        UpstreamError::Unavailable { reason, .. }
            if reason.contains("requires authorization") || reason.contains("HTTP 401") =>
        {
            anyhow::anyhow!(
            "the server requires authorization: give --bearer TOKEN, or --client-id with the secret in --client-secret-env ({reason})"
            )
        }
        UpstreamError::Unavailable { reason, .. } => anyhow::anyhow!("the server cannot be reached: {reason}"),
        other => anyhow::anyhow!("{other}"),
    }
}

/// Prints a tool result: its text (and what else it holds, briefly), or the JSON.
pub fn print_result(result: &Value, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(result).unwrap_or_default());
        return;
    }
    for content in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match content.get("type").and_then(Value::as_str) {
            Some("text") => println!("{}", printable(content.get("text").and_then(Value::as_str).unwrap_or_default())),
            Some(kind) => println!("[{} content]", printable(kind)),
            None => {}
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        println!("{structured}");
    }
}

/// A server's text as a terminal may show it: control characters (escape sequences that
/// would move the cursor, retitle the window or write the clipboard) become U+FFFD; line
/// breaks and tabs stay. `--json` prints the text as JSON, escaped.
pub fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{FFFD}' } else { c }).collect()
}

/// Whether a tool result says the tool failed.
pub fn is_tool_error(result: &Value) -> bool {
    result.get("isError").and_then(Value::as_bool).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_servers_escape_sequences_never_reach_the_terminal() {
        assert_eq!(super::printable("a\u{1b}]52;c;eA==\u{7}b\r\nc\td"), "a\u{FFFD}]52;c;eA==\u{FFFD}b\u{FFFD}\nc\td");
    }
}
