//! Operations endpoints: `/metrics` (Prometheus text format), `/healthz` (the process is alive)
//! and `/readyz` (configuration loaded; the task store's and each upstream's reachability; ready
//! when the store answers and every upstream marked `required` is reachable). The main listener
//! keeps `/metrics` and the details of `/readyz` to itself when `server.public_metrics` is off.

use actix_web::{web, HttpResponse};
use serde_json::json;
use taskgate_core::Gateway;

/// `GET /metrics`.
pub async fn metrics(gateway: web::Data<Gateway>) -> HttpResponse {
    gateway.metrics().reply_streams_held.set(crate::resumable::held() as i64);
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(gateway.render_metrics().await)
}

/// `GET /healthz`.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// `GET /readyz` with the details: 200 when ready, 503 otherwise; the body says why (the
/// store, each upstream, each authorization server). On the admin listener, and on the main
/// one when `server.public_metrics` allows.
pub async fn readyz(gateway: web::Data<Gateway>) -> HttpResponse {
    let report = gateway.ready_report().await;
    let upstreams: Vec<_> = report
        .upstreams
        .into_iter()
        .map(|u| json!({"name": u.name, "required": u.required, "reachable": u.reachable, "error": u.error}))
        .collect();
    let store = json!({"reachable": report.store.is_ok(), "error": report.store.err()});
    let oauth: Vec<_> =
        report.oauth.into_iter().map(|i| json!({"issuer": i.issuer, "keys": i.keys, "error": i.error})).collect();
    let body =
        json!({"ready": report.ready, "config": "loaded", "store": store, "upstreams": upstreams, "oauth": oauth});
    ready_or_not(report.ready, body)
}

/// `GET /readyz` on the main listener when its metrics are private: ready or not, no internals
/// (no upstream names, addresses or errors).
pub async fn readyz_public(gateway: web::Data<Gateway>) -> HttpResponse {
    let ready = gateway.ready_report().await.ready;
    ready_or_not(ready, json!({"ready": ready}))
}

fn ready_or_not(ready: bool, body: serde_json::Value) -> HttpResponse {
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Adds the operations routes to an app.
/// `GET /.well-known/oauth-protected-resource[/<path>]`: the protected resource metadata
/// (RFC 9728) of the MCP endpoint, when authorization servers are configured; the path-suffixed
/// form answers for the path of `server.public_url`, and for each profile's endpoint under it
/// (`<public_url>/<profile>`, a resource of its own).
pub async fn protected_resource(req: actix_web::HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let Some(metadata) = gateway.protected_resource_metadata(None) else {
        return HttpResponse::NotFound().finish();
    };
    let asked = req.path().trim_end_matches('/');
    let served = taskgate_core::resource_metadata_url(metadata["resource"].as_str().unwrap_or_default());
    let path_of = |url: &str| url.find("://").and_then(|i| url[i + 3..].find('/').map(|j| url[i + 3 + j..].to_owned()));
    // RFC 9728 section 3.1 puts the metadata of `https://host/mcp` at the path form; clients of
    // the 2025-06-18 era (and some current SDKs) look at the root form first, which names the
    // gateway's own endpoint. Any other path is no resource.
    let ours = path_of(&served).unwrap_or_default();
    let metadata = if asked == ours || asked == "/.well-known/oauth-protected-resource" {
        Some(metadata)
    } else {
        let profile = asked.strip_prefix(ours.as_str()).and_then(|rest| rest.strip_prefix('/'));
        profile.filter(|p| !p.contains('/')).and_then(|p| gateway.protected_resource_metadata(Some(p)))
    };
    match metadata {
        Some(metadata) => HttpResponse::Ok().insert_header(("Cache-Control", "max-age=300")).json(metadata),
        None => HttpResponse::NotFound().finish(),
    }
}

pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/metrics", web::get().to(metrics))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

/// The operations routes of the main listener: all of them when `server.public_metrics`
/// allows, else `/healthz` and the `/readyz` that says ready or not.
pub fn public_routes(public_metrics: bool) -> impl Fn(&mut web::ServiceConfig) + Clone {
    move |config: &mut web::ServiceConfig| {
        if public_metrics {
            routes(config);
        } else {
            config.route("/healthz", web::get().to(healthz)).route("/readyz", web::get().to(readyz_public));
        }
    }
}
