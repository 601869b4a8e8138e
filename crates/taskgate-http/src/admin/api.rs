//! The admin API: JSON, a page at a time (`limit`, default 50, at most 500; `cursor` from the
//! previous page's `nextCursor`, none after the last page).

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;
use taskgate_core::{Gateway, GatewayError};
use taskgate_protocol::tasks::TaskStatus;
use taskgate_store::TaskFilter;

use super::auth::{error, operator};

const DEFAULT_PAGE: usize = 50;

/// The query of a listing.
#[derive(Deserialize, Default)]
pub(super) struct Listing {
    tenant: Option<String>,
    principal: Option<String>,
    status: Option<String>,
    upstream: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

fn failure(e: GatewayError) -> HttpResponse {
    let status = match &e {
        GatewayError::SessionNotFound => StatusCode::NOT_FOUND,
        // The one answer for an unknown task (taskgate_core::tasks::not_found).
        GatewayError::InvalidParams(why) if why.contains("Task not found") => StatusCode::NOT_FOUND,
        GatewayError::InvalidParams(_) | GatewayError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
        e => StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    let status = if status.is_success() { StatusCode::BAD_REQUEST } else { status };
    error(status, e.to_string())
}

/// A query the listing cannot take: 400.
fn bad_query(why: impl Into<String>) -> HttpResponse {
    error(StatusCode::BAD_REQUEST, why)
}

/// `GET /admin/api/sessions?tenant=&cursor=&limit=`.
pub(super) async fn sessions(
    req: HttpRequest,
    gateway: web::Data<Gateway>,
    query: Result<web::Query<Listing>, actix_web::Error>,
) -> HttpResponse {
    if let Err(refused) = operator(&req, &gateway) {
        return refused;
    }
    let Ok(web::Query(query)) = query else { return bad_query("a query of tenant, cursor and limit") };
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    match gateway.admin_sessions(query.tenant.as_deref(), query.cursor.as_deref(), limit).await {
        Ok(page) => HttpResponse::Ok().json(json!({"sessions": page.items, "nextCursor": page.next_cursor})),
        Err(e) => failure(e),
    }
}

/// `GET /admin/api/tasks?tenant=&principal=&status=&upstream=&cursor=&limit=`.
pub(super) async fn tasks(
    req: HttpRequest,
    gateway: web::Data<Gateway>,
    query: Result<web::Query<Listing>, actix_web::Error>,
) -> HttpResponse {
    if let Err(refused) = operator(&req, &gateway) {
        return refused;
    }
    let Ok(web::Query(query)) = query else {
        return bad_query("a query of tenant, principal, status, upstream, cursor and limit");
    };
    let status = match query.status.as_deref().map(parse_status) {
        None => None,
        Some(Some(status)) => Some(status),
        Some(None) => return bad_query("status is one of working, input_required, completed, failed, cancelled"),
    };
    let filter = TaskFilter { tenant: query.tenant, principal: query.principal, status, upstream: query.upstream };
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    match gateway.admin_tasks(&filter, query.cursor.as_deref(), limit).await {
        Ok(page) => HttpResponse::Ok().json(json!({"tasks": page.items, "nextCursor": page.next_cursor})),
        Err(e) => failure(e),
    }
}

fn parse_status(status: &str) -> Option<TaskStatus> {
    serde_json::from_value(serde_json::Value::String(status.to_owned())).ok()
}

/// `GET /admin/api/upstreams`.
pub(super) async fn upstreams(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    if let Err(refused) = operator(&req, &gateway) {
        return refused;
    }
    HttpResponse::Ok().json(json!({"upstreams": gateway.admin_upstreams().await}))
}

/// `GET /admin/api/store`.
pub(super) async fn store(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    if let Err(refused) = operator(&req, &gateway) {
        return refused;
    }
    HttpResponse::Ok().json(gateway.admin_store().await)
}

/// Records an operator's action and what came of it.
fn audited(
    name: &str,
    action: &'static str,
    target: &str,
    outcome: Result<serde_json::Value, GatewayError>,
) -> HttpResponse {
    match outcome {
        Ok(body) => {
            tracing::info!(target: "taskgate::audit", operator = %name, action, target = %taskgate_core::logs::Untrusted(target), "admin action done");
            HttpResponse::Ok().json(body)
        }
        Err(e) => {
            let why = e.to_string();
            tracing::info!(target: "taskgate::audit", operator = %name, action, target = %taskgate_core::logs::Untrusted(target), error = %taskgate_core::logs::Untrusted(&why), "admin action refused");
            failure(e)
        }
    }
}

/// `POST /admin/api/sessions/{id}/end`.
pub(super) async fn end_session(req: HttpRequest, gateway: web::Data<Gateway>, id: web::Path<String>) -> HttpResponse {
    let name = match operator(&req, &gateway) {
        Ok(name) => name,
        Err(refused) => return refused,
    };
    let outcome = gateway.admin_end_session(&id).await;
    audited(&name, "end_session", &id, outcome)
}

/// `POST /admin/api/tasks/{id}/cancel`.
pub(super) async fn cancel_task(req: HttpRequest, gateway: web::Data<Gateway>, id: web::Path<String>) -> HttpResponse {
    let name = match operator(&req, &gateway) {
        Ok(name) => name,
        Err(refused) => return refused,
    };
    let outcome = gateway.admin_cancel_task(&id).await;
    audited(&name, "cancel_task", &id, outcome)
}

/// `POST /admin/api/upstreams/{name}/restart`.
pub(super) async fn restart_upstream(
    req: HttpRequest,
    gateway: web::Data<Gateway>,
    upstream: web::Path<String>,
) -> HttpResponse {
    let name = match operator(&req, &gateway) {
        Ok(name) => name,
        Err(refused) => return refused,
    };
    let outcome = gateway.admin_restart_upstream(&upstream);
    audited(&name, "restart_upstream", &upstream, outcome)
}
