//! Operations endpoints: `/metrics` (Prometheus text format), `/healthz` (the process is alive)
//! and `/readyz` (configuration loaded; each upstream's reachability; ready when every upstream
//! marked `required` is reachable).

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
    let (ready, upstreams) = gateway.readiness().await;
    let upstreams: Vec<_> = upstreams
        .into_iter()
        .map(|u| json!({"name": u.name, "required": u.required, "reachable": u.reachable, "error": u.error}))
        .collect();
    let body = json!({"ready": ready, "config": "loaded", "upstreams": upstreams});
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
