//! Section 12, credentials: what an OAuth access token costs against an API key, and what the
//! gateway keeps per principal for an upstream called with each caller's identity (token
//! exchange). A stand-in authorization server in this process publishes an ES256 key (JWKS,
//! cached by the gateway) and answers token exchanges with signed tokens of the usual size; the
//! upstream is the demo server, which ignores credentials.
//!
//! - Latency: sequential `tools/call`s through one gateway, interleaved call by call, with an
//!   API key, with a JWT access token, and straight to the upstream: added p50 of the token
//!   against the key (target ≤ 1.1).
//! - Memory: two gateways alike; N principals each open a session and call once, through an
//!   upstream that exchanges their tokens at one and, at the other, through a gateway with no
//!   such upstream (which keeps no token). The difference of the two gateways' resident memory
//!   growth, per principal, is what the tokens kept cost (the caller's own and the one
//!   exchanged for it).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{call, free_port, interleaved, ms, percentile, start_demo, start_gateway, verdict};
use crate::plan::Plan;
use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::{bail, Result};
use serde_json::json;
use taskgate_testkit::jwt::Es256Key;
use taskgate_testkit::McpClient;

const API_KEY: &str = "taskgate-bench-api-key-0001";
const AUDIENCE: &str = "taskgate-bench";

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The stand-in authorization server: `/jwks` and a token endpoint that answers every token
/// exchange. Its URL.
async fn authorization_server(key: Arc<Es256Key>) -> Result<String> {
    let port = free_port()?;
    let issuer = format!("http://127.0.0.1:{port}");
    let exchanged = Arc::new(AtomicU64::new(0));
    let (jwks, iss) = (json!({"keys": [key.public_jwk()]}).to_string(), issuer.clone());
    let server = HttpServer::new(move || {
        let (jwks, key, iss, exchanged) = (jwks.clone(), key.clone(), iss.clone(), exchanged.clone());
        App::new()
            .route(
                "/jwks",
                web::get().to(move || {
                    let jwks = jwks.clone();
                    async move {
                        HttpResponse::Ok()
                            .insert_header(("cache-control", "max-age=3600"))
                            .content_type("application/json")
                            .body(jwks)
                    }
                }),
            )
            .route(
                "/token",
                web::post().to(move || {
                    let n = exchanged.fetch_add(1, Ordering::Relaxed);
                    let claims = json!({"iss": iss, "sub": format!("exchanged-{n}"), "aud": "demo", "exp": now_secs() + 3600,
                        "scope": "mcp", "client_id": "bench", "act": {"sub": "bench"}, "jti": format!("bench-{n}")});
                    let token = key.sign(json!({"alg": "ES256", "typ": "at+jwt"}), claims);
                    async move {
                        HttpResponse::Ok().json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}))
                    }
                }),
            )
    })
    .workers(1)
    .bind(("127.0.0.1", port))?
    .run();
    actix_rt::spawn(server);
    Ok(issuer)
}

/// An access token of the stand-in server for principal `sub`.
fn access_token(key: &Es256Key, issuer: &str, sub: &str) -> String {
    let claims = json!({"iss": issuer, "sub": sub, "aud": AUDIENCE, "exp": now_secs() + 3600, "iat": now_secs(),
        "scope": "mcp", "client_id": "bench-client", "jti": format!("{sub}-token")});
    key.sign(json!({"alg": "ES256", "typ": "at+jwt"}), claims)
}

/// The gateway: the demo upstream, and (`exchanging`) the same behind token exchange.
fn gateway_config(demo_url: &str, issuer: &str, exchanging: bool) -> String {
    let hash: String = openssl::sha::sha256(API_KEY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let exchanged = if exchanging {
        format!(
            "[[upstream]]\nname = \"exchanged\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n\
             [upstream.oauth]\ngrant = \"token_exchange\"\ntoken_url = \"{issuer}/token\"\nissuer = \"{issuer}\"\n\
             client_id = \"bench\"\nclient_secret_env = \"TASKGATE_BENCH_EXCHANGE_SECRET\"\n"
        )
    } else {
        String::new()
    };
    format!(
        "max_sessions = 20000\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n{exchanged}\
         [[tenant]]\nid = \"bench\"\n[tenant.limits]\nmax_sessions = 20000\n\
         [[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{hash}\"\n\
         [[tenant.oauth]]\nissuer = \"{issuer}\"\naudience = \"{AUDIENCE}\"\njwks_uri = \"{issuer}/jwks\"\n"
    )
}

async fn connect_as(url: &str, bearer: &str) -> McpClient {
    let mut client = McpClient::with_bearer(url, bearer);
    client.initialize().await;
    client
}

/// Resident memory growth of a gateway while `principals` sessions of distinct principals each
/// call `tool` once (the sessions stay).
async fn growth(
    bin: &Path,
    config: &str,
    key: &Es256Key,
    issuer: &str,
    principals: usize,
    tool: &str,
) -> Result<(u64, f64, f64)> {
    let (gateway, url) = start_gateway(bin, config).await?;
    // Warm: the keys read, the catalog listed, a first exchange made.
    call(&connect_as(&url, &access_token(key, issuer, "warm")).await, tool).await?;
    let before = gateway.rss();
    let mut clients = Vec::with_capacity(principals);
    for i in 0..principals {
        let client = connect_as(&url, &access_token(key, issuer, &format!("user-{i}"))).await;
        call(&client, tool).await?;
        clients.push(client);
    }
    let after = gateway.rss();
    let exchanged = crate::harness::metric(&url, "taskgate_upstream_exchanged_tokens").await;
    let callers = crate::harness::metric(&url, "taskgate_oauth_caller_tokens").await;
    drop(clients);
    gateway.terminate().await;
    Ok((after.saturating_sub(before), exchanged, callers))
}

pub async fn credentials(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 12. Credentials: an OAuth access token against an API key, tokens kept per principal");
    println!();
    // The gateway reads its exchange client's secret from the environment.
    std::env::set_var("TASKGATE_BENCH_EXCHANGE_SECRET", "bench-secret");
    let key = Arc::new(Es256Key::generate("bench-1"));
    let issuer = authorization_server(key.clone()).await?;
    let (_demo, demo_url) = start_demo(bin).await?;
    let config = gateway_config(&demo_url, &issuer, true);
    let (gateway, url) = start_gateway(bin, &config).await?;
    let direct = crate::harness::connect(&demo_url).await?;
    let by_key = connect_as(&url, API_KEY).await;
    let by_token = connect_as(&url, &access_token(&key, &issuer, "alice")).await;
    for _ in 0..20 {
        call(&direct, "echo").await?;
        call(&by_key, "demo__echo").await?;
        call(&by_token, "demo__echo").await?;
    }
    let paths = [(&direct, "echo"), (&by_key, "demo__echo"), (&by_token, "demo__echo")];
    let [mut d, mut k, mut t] = interleaved(paths, plan.sequential).await?;
    let (d50, k50, t50) = (percentile(&mut d, 0.5), percentile(&mut k, 0.5), percentile(&mut t, 0.5));
    let (k99, t99) = (percentile(&mut k, 0.99), percentile(&mut t, 0.99));
    gateway.terminate().await;
    println!("| path | p50 | p99 |");
    println!("| --- | --- | --- |");
    println!("| direct to the upstream | {} | {} |", ms(d50), ms(percentile(&mut d, 0.99)));
    println!("| through taskgate, API key | {} | {} |", ms(k50), ms(k99));
    println!("| through taskgate, JWT access token (ES256, keys cached) | {} | {} |", ms(t50), ms(t99));
    let added = |through: Duration| through.saturating_sub(d50).max(Duration::from_micros(1));
    let ratio = added(t50).as_secs_f64() / added(k50).as_secs_f64();
    println!();
    println!(
        "- added p50 latency: token {} vs API key {}: ratio {:.2} (target ≤ 1.1: {})",
        ms(added(t50)),
        ms(added(k50)),
        ratio,
        verdict(ratio <= 1.1)
    );
    let principals = if plan.quick { 50 } else { 1000 };
    let plain_config = gateway_config(&demo_url, &issuer, false);
    let (plain, _, _) = growth(bin, &plain_config, &key, &issuer, principals, "demo__echo").await?;
    let (exchanging, exchanged, callers) = growth(bin, &config, &key, &issuer, principals, "exchanged__echo").await?;
    if exchanged < principals as f64 {
        bail!("{exchanged} exchanged tokens kept for {principals} principals");
    }
    let per = exchanging.saturating_sub(plain) as f64 / principals as f64;
    println!(
        "- {principals} principals, a session and a call each: gateway memory grew {:.1} MiB without token exchange, \
         {:.1} MiB with it ({exchanged} exchanged tokens and {callers} callers' tokens kept): {:.0} bytes per principal \
         for its tokens (target ≤ 4 KiB: {})",
        plain as f64 / 1048576.0,
        exchanging as f64 / 1048576.0,
        per,
        verdict(per <= 4096.0)
    );
    println!();
    Ok(())
}
