//! Section 15, refusals: what refusing each kind of bad credential costs the gateway, against
//! serving `ping` to an accepted client, in gateway CPU time per request (the sum over its
//! threads of the time on a CPU, from `/proc/PID/task/*/schedstat`, in nanoseconds), the paths
//! interleaved batch by batch. Every bad credential is new at each request (a counter in its
//! claims or bytes), so no cache of the gateway's answers it. A stand-in authorization server
//! publishes one ES256 key; a tenant also trusts a configured RS256 public key.
//!
//! With `TASKGATE_BENCH_PREVIOUS=/path/to/an/older/taskgate`, the same runs against that build
//! too, and each path's cost is also given as a ratio to it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::{bail, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Signer;
use serde_json::{json, Value};
use taskgate_testkit::jwt::Es256Key;

use crate::harness::{free_port, start_demo, start_gateway, verdict};
use crate::plan::Plan;

const API_KEY: &str = "taskgate-bench-refusals-key-01";
const AUDIENCE: &str = "taskgate-bench";
/// The first paths are accepted; the others are refusals.
const ACCEPTED: usize = 2;

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Gateway CPU time so far, over all its threads.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The stand-in authorization server: its JWKS. Its URL.
async fn authorization_server(key: &Es256Key) -> Result<String> {
    let port = free_port()?;
    let jwks = json!({"keys": [key.public_jwk()]}).to_string();
    let server = HttpServer::new(move || {
        let jwks = jwks.clone();
        App::new().route(
            "/jwks",
            web::get().to(move || {
                let jwks = jwks.clone();
                async move { HttpResponse::Ok().content_type("application/json").body(jwks) }
            }),
        )
    })
    .workers(1)
    .bind(("127.0.0.1", port))?
    .run();
    actix_rt::spawn(server);
    Ok(format!("http://127.0.0.1:{port}"))
}

fn rs256(key: &PKey<Private>, claims: &Value) -> String {
    let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let input = format!("{}.{}", b64(&json!({"alg": "RS256", "typ": "JWT"})), b64(claims));
    let signature = Signer::new(MessageDigest::sha256(), key).unwrap().sign_oneshot_to_vec(input.as_bytes()).unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// What one path sends as `Authorization` for its `n`th request (`None`: no header).
type Credential = Box<dyn Fn(u64) -> Option<String>>;

struct Paths {
    names: Vec<&'static str>,
    credentials: Vec<Credential>,
}

/// The keys the paths sign with: the issuer's, another under the issuer's key id, one under a
/// key id the issuer does not publish, and an RSA key no tenant trusts.
struct Signers {
    trusted: Arc<Es256Key>,
    stranger: Arc<Es256Key>,
    unpublished: Arc<Es256Key>,
    forger: Arc<PKey<Private>>,
}

fn paths(issuer: &str, signers: &Signers) -> Paths {
    // An access token of `key` (whose key id goes in its header), new at each request.
    let token = |key: &Arc<Es256Key>, iss: String, exp: i64| -> Credential {
        let key = key.clone();
        Box::new(move |n| {
            let claims = json!({"iss": iss, "sub": format!("user-{n}"), "aud": AUDIENCE,
                "exp": now_secs() as i64 + exp, "scope": "mcp", "jti": format!("t-{n}")});
            Some(format!("Bearer {}", key.sign(json!({"alg": "ES256", "typ": "at+jwt"}), claims)))
        })
    };
    let Signers { trusted, stranger, unpublished, forger } = signers;
    let iss = issuer.to_owned();
    let forger = forger.clone();
    let accepted_token = trusted.sign(
        json!({"alg": "ES256", "typ": "at+jwt"}),
        json!({"iss": iss, "sub": "alice", "aud": AUDIENCE, "exp": now_secs() + 86_400, "scope": "mcp"}),
    );
    let list: Vec<(&'static str, Credential)> = vec![
        ("ping, API key (accepted)", Box::new(|_| Some(format!("Bearer {API_KEY}")))),
        (
            "ping, ES256 access token (accepted, verified once)",
            Box::new(move |_| Some(format!("Bearer {accepted_token}"))),
        ),
        ("no credentials", Box::new(|_| None)),
        ("a wrong API key", Box::new(|n| Some(format!("Bearer wrong-key-{n:020}")))),
        (
            "a forged RS256 JWT (a key no tenant trusts)",
            Box::new(move |n| {
                let claims = json!({"sub": "mallory", "aud": AUDIENCE, "exp": now_secs() + 600, "jti": n});
                Some(format!("Bearer {}", rs256(&forger, &claims)))
            }),
        ),
        ("a forged ES256 access token (its issuer's key id)", token(stranger, iss.clone(), 600)),
        ("an expired ES256 access token (correctly signed)", token(trusted, iss.clone(), -600)),
        ("an access token of an unknown issuer", token(trusted, "https://unknown.example".into(), 600)),
        ("an access token naming a key id its issuer does not publish", token(unpublished, iss, 600)),
        ("an opaque token", Box::new(|n| Some(format!("Bearer opaque-{n:032}")))),
    ];
    let (names, credentials) = list.into_iter().unzip();
    Paths { names, credentials }
}

fn gateway_config(demo_url: &str, issuer: &str, rs256_public: &str) -> String {
    let hash: String = openssl::sha::sha256(API_KEY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n\
         [[tenant]]\nid = \"bench\"\n[tenant.limits]\nrate = {{ per_second = 1000000.0, burst = 1000000 }}\n\
         [[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{hash}\"\n\
         [[tenant.oauth]]\nissuer = \"{issuer}\"\naudience = \"{AUDIENCE}\"\njwks_uri = \"{issuer}/jwks\"\n\
         [[tenant.jwt]]\nalgorithm = \"RS256\"\naudience = \"{AUDIENCE}\"\npublic_key = '''\n{rs256_public}'''\n"
    )
}

/// Gateway CPU per request of each path, the median over interleaved batches.
async fn measure(bin: &Path, config: &str, paths: &Paths, plan: &Plan) -> Result<Vec<Duration>> {
    let (gateway, url) = start_gateway(bin, config).await?;
    let http = reqwest::Client::new();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let seq = AtomicU64::new(0);
    let post = |authorization: Option<String>, session: Option<&str>, body: String| {
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    // The accepted paths ping in a session of their own.
    let mut sessions: Vec<Option<String>> = Vec::new();
    for (i, credential) in paths.credentials.iter().enumerate() {
        if i >= ACCEPTED {
            sessions.push(None);
            continue;
        }
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let answer = post(credential(0), None, initialize.to_string()).await?;
        let Some(id) = answer.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned) else {
            bail!("{}: initialize answered {} with no session", paths.names[i], answer.status());
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        post(credential(0), Some(&id), initialized).await?;
        sessions.push(Some(id));
    }
    let send = |i: usize| {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        post(paths.credentials[i](n), sessions[i].as_deref(), ping.clone())
    };
    // Warm: the issuer's keys read, an accepted token verified once, each path tried.
    for _ in 0..20 {
        for i in 0..paths.credentials.len() {
            let _ = send(i).await?.bytes().await;
        }
    }
    for i in 0..paths.credentials.len() {
        let status = send(i).await?.status();
        let expected = if i < ACCEPTED { reqwest::StatusCode::OK } else { reqwest::StatusCode::UNAUTHORIZED };
        if status != expected {
            bail!("{}: answered {status}, not {expected}", paths.names[i]);
        }
    }
    let (rounds, batch) = if plan.quick { (3, 20) } else { (15, 400) };
    let mut costs = vec![Vec::new(); paths.credentials.len()];
    for _ in 0..rounds {
        for (i, cost) in costs.iter_mut().enumerate() {
            let before = cpu_ns(gateway.pid());
            for _ in 0..batch {
                let _ = send(i).await?.bytes().await;
            }
            cost.push((cpu_ns(gateway.pid()) - before) / batch);
        }
    }
    gateway.terminate().await;
    Ok(costs
        .into_iter()
        .map(|mut c| {
            c.sort_unstable();
            Duration::from_nanos(c[c.len() / 2])
        })
        .collect())
}

pub async fn refusals(plan: &Plan, bin: &Path) -> Result<()> {
    println!("## 15. Refusals: what each bad credential costs the gateway, against serving ping");
    println!();
    let signers = Signers {
        trusted: Arc::new(Es256Key::generate("bench-1")),
        stranger: Arc::new(Es256Key::generate("bench-1")),
        unpublished: Arc::new(Es256Key::generate("rotated-away")),
        forger: Arc::new(PKey::from_rsa(Rsa::generate(2048)?)?),
    };
    let rsa = PKey::from_rsa(Rsa::generate(2048)?)?;
    let rs256_public = String::from_utf8(rsa.public_key_to_pem()?)?;
    let issuer = authorization_server(&signers.trusted).await?;
    let (_demo, demo_url) = start_demo(bin).await?;
    let config = gateway_config(&demo_url, &issuer, &rs256_public);
    let paths = paths(&issuer, &signers);
    let now = measure(bin, &config, &paths, plan).await?;
    let previous = match std::env::var_os("TASKGATE_BENCH_PREVIOUS") {
        Some(old) => Some(measure(Path::new(&old), &config, &paths, plan).await?),
        None => None,
    };
    let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
    let ping = now[0].as_secs_f64().max(1e-9);
    match &previous {
        Some(_) => {
            println!("| request | gateway CPU per request | against ping | the previous build | now / previous |");
            println!("| --- | --- | --- | --- | --- |");
        }
        None => {
            println!("| request | gateway CPU per request | against ping |");
            println!("| --- | --- | --- |");
        }
    }
    let mut worst: f64 = 0.0;
    for (i, name) in paths.names.iter().enumerate() {
        let ratio = now[i].as_secs_f64() / ping;
        if i >= ACCEPTED {
            worst = worst.max(ratio);
        }
        match &previous {
            Some(old) => println!(
                "| {name} | {} | {ratio:.2} | {} | {:.2} |",
                us(now[i]),
                us(old[i]),
                now[i].as_secs_f64() / old[i].as_secs_f64().max(1e-9)
            ),
            None => println!("| {name} | {} | {ratio:.2} |", us(now[i])),
        }
    }
    println!();
    println!(
        "- the costliest refusal against serving ping with an API key: {worst:.2} (target ≤ 1.0: {})",
        verdict(worst <= 1.0)
    );
    println!();
    Ok(())
}
