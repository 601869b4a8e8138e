//! The admin page: one server-rendered HTML page showing the newest tasks (with their progress
//! bars), sessions per tenant and each upstream's health. The server renders the live part
//! again every `admin.refresh_ms` and sends it over SSE (`/admin/events`); a few lines of
//! script put it in place and send the operator's actions (cancel a task, restart an
//! upstream's processes) to the API.

use std::convert::Infallible;
use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde_json::Value;
use taskgate_core::Gateway;
use taskgate_store::TaskFilter;

use super::auth::operator;

/// Tasks the page shows, newest first.
const PAGE_TASKS: usize = 50;
/// With Redis (no order), at most this many tasks are looked at to find the newest.
const SCAN_TASKS: usize = 5_000;
/// At most this many sessions are counted per tenant.
const COUNT_SESSIONS: usize = 10_000;

/// What a listener's pages share: their streams, bounded, and the live part last rendered,
/// which every stream sends (one rendering per `admin.refresh_ms` however many pages are open).
pub(super) struct Pages {
    open: Arc<AtomicUsize>,
    max: usize,
    latest: tokio::sync::Mutex<Option<(std::time::Instant, Arc<str>)>>,
}

impl Pages {
    pub(super) fn new(max: usize) -> Pages {
        Pages { open: Arc::default(), max, latest: tokio::sync::Mutex::new(None) }
    }

    fn take(&self) -> Option<StreamPlace> {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1));
        taken.ok().map(|_| StreamPlace(self.open.clone()))
    }

    /// The live part, rendered again when the last rendering is older than `every`.
    async fn snapshot(&self, gateway: &Gateway, every: Duration) -> Arc<str> {
        let mut latest = self.latest.lock().await;
        if let Some((at, html)) = latest.as_ref() {
            if at.elapsed() < every {
                return html.clone();
            }
        }
        let html: Arc<str> = snapshot(gateway).await.into();
        *latest = Some((std::time::Instant::now(), html.clone()));
        html
    }
}

/// One open stream's place, given back when the stream ends (its client left).
struct StreamPlace(Arc<AtomicUsize>);

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GET /admin`: the page is `/admin/`.
pub(super) async fn redirect() -> HttpResponse {
    HttpResponse::PermanentRedirect().insert_header((header::LOCATION, "/admin/")).finish()
}

/// `GET /admin/`: the page, with the live part as it is now.
pub(super) async fn page(req: HttpRequest, gateway: web::Data<Gateway>, pages: web::Data<Pages>) -> HttpResponse {
    let name = match operator(&req, &gateway) {
        Ok(name) => name,
        Err(refused) => return refused,
    };
    let live = pages.snapshot(&gateway, refresh(&gateway)).await;
    let body = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>taskgate · {replica}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }}
h1 {{ font-size: 1.3em; margin: 0 0 .2em; }} h2 {{ font-size: 1.05em; margin: 1.4em 0 .4em; }}
table {{ border-collapse: collapse; width: 100%; }} th, td {{ text-align: left; padding: .25em .6em; border-bottom: 1px solid #e3e6ee; }}
th {{ font-weight: 600; background: #f5f6fa; }} code {{ font-size: .92em; }}
progress {{ width: 10em; vertical-align: middle; }} .muted {{ color: #6b7285; }}
.ok {{ color: #107a3a; }} .down {{ color: #b3261e; font-weight: 600; }}
.status-working, .status-input_required {{ color: #1a56b8; }} .status-completed {{ color: #107a3a; }}
.status-failed, .status-cancelled {{ color: #b3261e; }}
button {{ font: inherit; padding: .1em .6em; }}
</style></head>
<body>
<h1>taskgate</h1>
<p class="muted">Replica <code>{replica}</code> · version {version} · signed in as {operator} · <span id="state">live</span></p>
<div id="live">{live}</div>
<script>
const live = document.getElementById('live'), state = document.getElementById('state');
const events = new EventSource('/admin/events');
events.addEventListener('snapshot', e => {{ live.innerHTML = e.data; state.textContent = 'live'; }});
events.onerror = () => {{ state.textContent = 'reconnecting…'; }};
document.addEventListener('click', async e => {{
  const button = e.target.closest('button[data-action]');
  if (!button || !confirm(button.title + '?')) return;
  const answer = await fetch(button.dataset.action, {{ method: 'POST' }});
  if (!answer.ok) alert((await answer.json()).error);
}});
</script>
</body></html>
"#,
        replica = escape(gateway.replica()),
        version = env!("CARGO_PKG_VERSION"),
        operator = escape(&name),
    );
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
        ))
        .insert_header(("X-Frame-Options", "DENY"))
        .body(body)
}

/// `GET /admin/events`: the live part, rendered again every `admin.refresh_ms`, as SSE
/// `snapshot` events, until the client leaves.
pub(super) async fn events(req: HttpRequest, gateway: web::Data<Gateway>, pages: web::Data<Pages>) -> HttpResponse {
    if let Err(refused) = operator(&req, &gateway) {
        return refused;
    }
    let Some(place) = pages.take() else {
        return super::auth::error(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, "too many admin pages open");
    };
    let every = refresh(&gateway);
    let gateway = gateway.into_inner();
    let pages = pages.into_inner();
    let body =
        futures_util::stream::unfold((gateway, pages, place, true), move |(gateway, pages, place, first)| async move {
            if !first {
                tokio::time::sleep(every).await;
            }
            let html = pages.snapshot(&gateway, every).await;
            let mut event = String::with_capacity(html.len() + 32);
            event.push_str("event: snapshot\n");
            // Values are escaped (no CR or other control character): lines end only where the
            // rendering ends them.
            for line in html.split(['\n', '\r']) {
                event.push_str("data: ");
                event.push_str(line);
                event.push('\n');
            }
            event.push('\n');
            Some((Ok::<_, Infallible>(Bytes::from(event)), (gateway, pages, place, false)))
        });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// How often the page is brought up to date.
fn refresh(gateway: &Gateway) -> Duration {
    Duration::from_millis(gateway.admin_config().refresh_ms.max(100))
}

/// HTML text with `<`, `>`, `&` and quotes escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // A control character (CR, ESC…) is written as a reference: no raw one reaches the
            // page's event stream, where CR would end a line.
            c if c.is_control() => {
                let _ = write!(out, "&#{};", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => escape(s),
        Value::Null => String::new(),
        other => escape(&other.to_string()),
    }
}

/// The newest tasks: the first page of a store that pages newest first; with Redis, the newest
/// of those a bounded scan finds.
async fn newest_tasks(gateway: &Gateway) -> Result<Vec<Value>, String> {
    let filter = TaskFilter::default();
    if !gateway.shares_store() {
        return gateway.admin_tasks(&filter, None, PAGE_TASKS).await.map(|p| p.items).map_err(|e| e.to_string());
    }
    let mut all = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut cursor: Option<String> = None;
    while all.len() < SCAN_TASKS {
        let page = gateway.admin_tasks(&filter, cursor.as_deref(), 500).await.map_err(|e| e.to_string())?;
        // A Redis scan may meet a task twice.
        all.extend(page.items.into_iter().filter(|t| seen.insert(t["taskId"].as_str().unwrap_or_default().to_owned())));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    all.sort_by_key(|t| std::cmp::Reverse(t["createdMs"].as_u64().unwrap_or(0)));
    all.truncate(PAGE_TASKS);
    Ok(all)
}

/// The live part of the page, rendered now (one line of HTML per row).
async fn snapshot(gateway: &Gateway) -> String {
    let mut html = String::new();
    let store = gateway.admin_store().await;
    let reachable = store["reachable"] == true;
    let _ = writeln!(
        html,
        r#"<p id="store">Store: <strong>{}</strong> {} · <span class="{}">{}</span> · {} tasks held · {} run here</p>"#,
        text(&store["store"]["backend"]),
        text(&store["store"]["location"]),
        if reachable { "ok" } else { "down" },
        if reachable { "reachable".to_owned() } else { format!("unreachable: {}", text(&store["error"])) },
        text(&store["store"]["tasks"]),
        text(&store["tasksRunHere"]),
    );
    html.push_str("<h2>Tasks</h2>\n");
    match newest_tasks(gateway).await {
        Err(why) => {
            let _ = writeln!(html, r#"<p class="down">Tasks cannot be listed: {}</p>"#, escape(&why));
        }
        Ok(tasks) if tasks.is_empty() => html.push_str("<p class=\"muted\" id=\"no-tasks\">No tasks.</p>\n"),
        Ok(tasks) => {
            html.push_str("<table id=\"tasks\"><tr><th>Task</th><th>Tenant</th><th>Principal</th><th>Upstream</th><th>Tool</th><th>Status</th><th>Progress</th><th>Age</th><th></th></tr>\n");
            for task in &tasks {
                task_row(&mut html, task);
            }
            html.push_str("</table>\n");
        }
    }
    html.push_str("<h2>Sessions per tenant</h2>\n");
    match gateway.admin_session_counts(COUNT_SESSIONS).await.map_err(|e| e.to_string()) {
        Err(why) => {
            let _ = writeln!(html, r#"<p class="down">Sessions cannot be listed: {}</p>"#, escape(&why));
        }
        Ok(counts) if counts.is_empty() => html.push_str("<p class=\"muted\" id=\"no-sessions\">No sessions.</p>\n"),
        Ok(counts) => {
            html.push_str(
                "<table id=\"sessions\"><tr><th>Tenant</th><th>Sessions here</th><th>At other replicas</th></tr>\n",
            );
            for (tenant, (here, elsewhere)) in counts {
                let _ = writeln!(
                    html,
                    r#"<tr data-tenant="{t}"><td>{t}</td><td class="here">{here}</td><td>{elsewhere}</td></tr>"#,
                    t = escape(&tenant)
                );
            }
            html.push_str("</table>\n");
        }
    }
    html.push_str("<h2>Upstreams</h2>\n<table id=\"upstreams\"><tr><th>Upstream</th><th>Transport</th><th>Revision</th><th>Health</th><th>Sessions</th><th>Processes</th><th>Connections</th><th></th></tr>\n");
    for upstream in gateway.admin_upstreams().await {
        upstream_row(&mut html, &upstream);
    }
    html.push_str("</table>\n");
    html
}

/// A progress message after its numbers.
fn message(value: &Value) -> String {
    match value.as_str() {
        Some(m) if !m.is_empty() => format!(" · {}", escape(m)),
        _ => String::new(),
    }
}

fn task_row(html: &mut String, task: &Value) {
    let id = text(&task["taskId"]);
    let status = task["status"].as_str().unwrap_or_default();
    let live = matches!(status, "working" | "input_required");
    let progress = &task["progress"];
    let bar = match (progress["progress"].as_f64(), progress["total"].as_f64()) {
        (Some(value), Some(total)) => format!(
            r#"<progress value="{value}" max="{total}"></progress> <span class="progress-label">{value} / {total}{}</span>"#,
            message(&progress["message"])
        ),
        (Some(value), None) => {
            format!(
                r#"<progress></progress> <span class="progress-label">{value}{}</span>"#,
                message(&progress["message"])
            )
        }
        // A live task without progress: a bar with no value (indeterminate).
        _ if live => "<progress></progress>".to_owned(),
        _ => String::new(),
    };
    // What the task says of itself (a native task's status message: "Gathering sources…"),
    // beside its status.
    let said = match task["statusMessage"].as_str() {
        Some(m) if !m.is_empty() => format!(r#"<br><span class="muted status-message">{}</span>"#, escape(m)),
        _ => String::new(),
    };
    let cancel = if live {
        format!(r#"<button data-action="/admin/api/tasks/{id}/cancel" title="Cancel task {id}">Cancel</button>"#)
    } else {
        String::new()
    };
    let _ = writeln!(
        html,
        r#"<tr data-task="{id}" data-status="{status}"><td><code title="{id}">{short}</code></td><td>{tenant}</td><td>{principal}</td><td>{upstream}</td><td>{tool}</td><td class="status status-{status}">{status}{said}</td><td class="progress">{bar}</td><td>{age} s</td><td>{cancel}</td></tr>"#,
        short = escape(&id.chars().take(8).collect::<String>()),
        status = escape(status),
        tenant = text(&task["tenant"]),
        principal = text(&task["principal"]),
        upstream = text(&task["upstream"]),
        tool = text(&task["tool"]),
        age = text(&task["ageSecs"]),
    );
}

fn upstream_row(html: &mut String, upstream: &Value) {
    let name = text(&upstream["name"]);
    let health = if upstream["reachable"] == true {
        r#"<span class="ok">up</span>"#.to_owned()
    } else {
        format!(r#"<span class="down">down</span> <span class="muted">{}</span>"#, text(&upstream["error"]))
    };
    let sessions = &upstream["sessions"];
    let stdio = upstream["transport"] == "stdio";
    let restart = if stdio {
        format!(
            r#"<button data-action="/admin/api/upstreams/{name}/restart" title="Restart the processes of {name}">Restart</button>"#
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        html,
        r#"<tr data-upstream="{name}" data-reachable="{reachable}"><td>{name}</td><td>{transport}</td><td>{revision}</td><td>{health}</td><td>{own} own · {shared} shared · {pooled} pooled</td><td>{processes}</td><td>{connections}</td><td>{restart}</td></tr>"#,
        reachable = upstream["reachable"] == true,
        transport = text(&upstream["transport"]),
        revision =
            if upstream["protocolVersion"].is_null() { "—".to_owned() } else { text(&upstream["protocolVersion"]) },
        own = text(&sessions["own"]),
        shared = text(&sessions["shared"]),
        pooled = text(&sessions["pooled"]),
        processes = if stdio { text(&upstream["processes"]) } else { "—".to_owned() },
        connections = if stdio { "—".to_owned() } else { text(&upstream["connections"]) },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_text() {
        assert_eq!(escape(r#"<img src=x onerror="a()">&'"#), "&lt;img src=x onerror=&quot;a()&quot;&gt;&amp;&#39;");
        assert_eq!(escape("x\revent: y\n\u{1b}[2J"), "x&#13;event: y&#10;&#27;[2J");
        let mut html = String::new();
        task_row(
            &mut html,
            &serde_json::json!({"taskId": "<b>", "status": "working", "tenant": "<script>", "statusMessage": "<u>Gathering sources", "progress": {"progress": 1, "total": 4, "message": "<i>"}}),
        );
        assert!(
            !html.contains("<script>") && !html.contains("<i>") && !html.contains("<b>") && !html.contains("<u>"),
            "{html}"
        );
        assert!(html.contains(r#"<progress value="1" max="4">"#), "{html}");
        assert!(html.contains(r#"<span class="muted status-message">&lt;u&gt;Gathering sources</span>"#), "{html}");
    }

    #[test]
    fn a_stream_place_is_given_back_when_its_stream_ends() {
        let streams = Pages::new(2);
        let a = streams.take().unwrap();
        let _b = streams.take().unwrap();
        assert!(streams.take().is_none());
        drop(a);
        assert!(streams.take().is_some());
    }
}
