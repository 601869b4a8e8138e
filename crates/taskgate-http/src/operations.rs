//! Operations endpoints: `/metrics` (Prometheus text format), `/healthz` (the process is alive)
//! and `/readyz` (configuration loaded; the task store's and each upstream's reachability; ready
//! when the store answers and every upstream marked `required` is reachable).

use actix_web::{web, HttpResponse};
use serde_json::json;
use taskgate_core::Gateway;

/// `GET /metrics`.
pub async fn metrics(gateway: web::Data<Gateway>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(gateway.render_metrics().await)
}

/// `GET /healthz`.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// `GET /readyz`: 200 when ready, 503 otherwise; the body lists every upstream.
pub async fn readyz(gateway: web::Data<Gateway>) -> HttpResponse {
    let (upstreams_ready, upstreams) = gateway.readiness().await;
    let store = gateway.store_health().await;
    let ready = upstreams_ready && store.is_ok();
    let upstreams: Vec<_> = upstreams
        .into_iter()
        .map(|u| json!({"name": u.name, "required": u.required, "reachable": u.reachable, "error": u.error}))
        .collect();
    let store = json!({"reachable": store.is_ok(), "error": store.err()});
    let body = json!({"ready": ready, "config": "loaded", "store": store, "upstreams": upstreams});
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Adds the operations routes to an app.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/metrics", web::get().to(metrics))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}
