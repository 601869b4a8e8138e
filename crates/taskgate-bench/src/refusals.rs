//! Section 15, refusals: what refusing each kind of bad credential costs the gateway, against
//! serving `ping` to an accepted client, in gateway CPU time per request (the process's CPU-time
//! clock, in nanoseconds), the paths and the builds interleaved batch by batch. Every bad
//! credential is new at each request (a counter in its claims or bytes), so no cache of the
//! gateway's answers it, and each request comes from a client of its own, so each refusal is
//! checked, except in the two floods: forged tokens from one client, past its share of checked
//! refusals a second answered 429 unchecked (their CPU is the flood's at the bench's rate, its
//! checked refusals included; their instructions are the unchecked refusal's, each request
//! measured alone and only the 429s kept). A stand-in
//! authorization server publishes one ES256 key; a tenant also trusts a configured RS256 public
//! key.
//!
//! With `TASKGATE_BENCH_PREVIOUS=/path/to/an/older/taskgate`, the same runs against that build
//! too, and each path's cost is also given as a ratio to it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::{bail, Context, Result};
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

/// Gateway CPU time so far, all its threads (ended ones too), in nanoseconds: the process's
/// CPU-time clock (`clock_getcpuclockid`), not the scheduler's tick counts.
fn cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both calls only write the values passed by pointer, which live on this stack.
    let read = unsafe {
        libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0 && libc::clock_gettime(clock, &mut now) == 0
    };
    if read {
        now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
    } else {
        0
    }
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
    /// Which paths are floods (one client's requests one after another: past its share of
    /// checked refusals in a second, the rest are answered 429 unchecked), each with the path
    /// whose checked refusal it repeats.
    floods: Vec<Option<usize>>,
}

/// Path `i`'s `n`th request comes from this client (`x-forwarded-for`, which the trusted
/// loopback proxy names): each request its own, so that every refusal is a checked one as a
/// client's first are, or for a flood, one client for all.
fn source(paths: &Paths, i: usize, n: u64) -> String {
    if paths.floods[i].is_some() {
        return format!("11.0.0.{i}");
    }
    let n = n * 16 + i as u64;
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
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
    let flood_forger = forger.clone();
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
        (
            "a flood of forged RS256 JWTs from one client",
            Box::new(move |n| {
                let claims = json!({"sub": "mallory", "aud": AUDIENCE, "exp": now_secs() + 600, "jti": n});
                Some(format!("Bearer {}", rs256(&flood_forger, &claims)))
            }),
        ),
        ("a flood of forged ES256 access tokens from one client", token(stranger, issuer.to_owned(), 600)),
    ];
    let floods = list.iter().map(|(name, _)| match *name {
        "a flood of forged RS256 JWTs from one client" => Some(4),
        "a flood of forged ES256 access tokens from one client" => Some(5),
        _ => None,
    });
    let floods: Vec<Option<usize>> = floods.collect();
    let (names, credentials): (Vec<_>, Vec<_>) = list.into_iter().unzip();
    debug_assert_eq!(names[4], "a forged RS256 JWT (a key no tenant trusts)");
    debug_assert_eq!(names[5], "a forged ES256 access token (its issuer's key id)");
    Paths { names, credentials, floods }
}

fn gateway_config(demo_url: &str, issuer: &str, rs256_public: &str) -> String {
    let hash: String = openssl::sha::sha256(API_KEY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "trusted_proxies = [\"127.0.0.1\"]\nforwarded_header = \"x-forwarded-for\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{demo_url}\"\n\
         [[tenant]]\nid = \"bench\"\n[tenant.limits]\nrate = {{ per_second = 1000000.0, burst = 1000000 }}\n\
         [[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{hash}\"\n\
         [[tenant.oauth]]\nissuer = \"{issuer}\"\naudience = \"{AUDIENCE}\"\njwks_uri = \"{issuer}/jwks\"\n\
         [[tenant.jwt]]\nalgorithm = \"RS256\"\naudience = \"{AUDIENCE}\"\npublic_key = '''\n{rs256_public}'''\n"
    )
}

/// One gateway build under measure, with the sessions of its accepted paths.
struct Target {
    gateway: crate::harness::Process,
    url: String,
    sessions: Vec<Option<String>>,
}

/// A `ping` (or `body`) POST with `authorization` in `session`, from client `source`.
fn post(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<String>,
    session: Option<&str>,
    body: String,
    source: String,
) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> {
    let mut request = http
        .post(url)
        .header("x-forwarded-for", source)
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
}

/// Starts `bin`, opens the accepted paths' sessions and warms every path (the issuer's keys
/// read, an accepted token verified once), checking each answers as it should.
async fn start_target(http: &reqwest::Client, bin: &Path, config: &str, paths: &Paths) -> Result<Target> {
    let (gateway, url) = start_gateway(bin, config).await?;
    prepare(http, gateway, url, paths).await
}

async fn prepare(
    http: &reqwest::Client,
    gateway: crate::harness::Process,
    url: String,
    paths: &Paths,
) -> Result<Target> {
    let mut sessions: Vec<Option<String>> = Vec::new();
    for (i, credential) in paths.credentials.iter().enumerate() {
        if i >= ACCEPTED {
            sessions.push(None);
            continue;
        }
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let answer = post(http, &url, credential(0), None, initialize.to_string(), source(paths, i, 0)).await?;
        let Some(id) = answer.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned) else {
            bail!("{}: initialize answered {} with no session", paths.names[i], answer.status());
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        post(http, &url, credential(0), Some(&id), initialized, source(paths, i, 0)).await?;
        sessions.push(Some(id));
    }
    let target = Target { gateway, url, sessions };
    for round in 0..21 {
        for i in 0..paths.credentials.len() {
            let status = send(http, &target, paths, i, round).await?;
            let expected = if i < ACCEPTED { reqwest::StatusCode::OK } else { reqwest::StatusCode::UNAUTHORIZED };
            // A flood is refused 401, then (past the client's share) 429.
            let flooded = paths.floods[i].is_some() && status == reqwest::StatusCode::TOO_MANY_REQUESTS;
            if round == 20 && status != expected && !flooded {
                bail!("{}: answered {status}, not {expected}", paths.names[i]);
            }
        }
    }
    Ok(target)
}

/// Path `i`'s `n`th ping at `target`, read to its end.
async fn send(http: &reqwest::Client, target: &Target, paths: &Paths, i: usize, n: u64) -> Result<reqwest::StatusCode> {
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let from = source(paths, i, n);
    let answer = post(http, &target.url, paths.credentials[i](n), target.sessions[i].as_deref(), ping, from).await?;
    let status = answer.status();
    answer.bytes().await?;
    Ok(status)
}

/// Gateway CPU per request of each path at each target, the median over batches interleaved
/// path by path and target by target.
async fn measure(http: &reqwest::Client, targets: &[Target], paths: &Paths, plan: &Plan) -> Result<Vec<Vec<Duration>>> {
    let (rounds, batch) = if plan.quick { (3, 20) } else { (25, 1000) };
    let seq = AtomicU64::new(1_000);
    // By path, then by target: each batch's CPU per request.
    let mut costs = vec![vec![Vec::new(); targets.len()]; paths.credentials.len()];
    for _ in 0..rounds {
        for (i, per_target) in costs.iter_mut().enumerate() {
            for (target, cost) in targets.iter().zip(per_target.iter_mut()) {
                let before = cpu_ns(target.gateway.pid());
                for _ in 0..batch {
                    send(http, target, paths, i, seq.fetch_add(1, Ordering::Relaxed)).await?;
                }
                cost.push((cpu_ns(target.gateway.pid()) - before) / batch);
            }
        }
    }
    let median = |mut c: Vec<u64>| {
        c.sort_unstable();
        Duration::from_nanos(c[c.len() / 2])
    };
    let mut by_target = vec![Vec::new(); targets.len()];
    for per_target in costs {
        for (t, cost) in per_target.into_iter().enumerate() {
            by_target[t].push(median(cost));
        }
    }
    Ok(by_target)
}

/// Instructions the gateway runs per request of each path (callgrind, zeroed and dumped
/// around each path's requests in one run): figures that do not move with the machine's noise,
/// though they leave out the kernel's work.
///
/// A flood's count is 0 where no group came out clean: an older build whose checked refusals
/// take the whole of a second under callgrind (`strict` makes that an error instead).
async fn instructions(
    http: &reqwest::Client,
    bin: &Path,
    config: &str,
    paths: &Paths,
    (n, strict): (u64, bool),
) -> Result<Vec<u64>> {
    // Each run its own number: this build's and a previous one's profiles are kept apart.
    let run = paths_seq();
    let out = std::env::temp_dir().join(format!("taskgate-bench-refusals-{}-{run}", std::process::id()));
    let wrap =
        ["valgrind".to_owned(), "--tool=callgrind".to_owned(), format!("--callgrind-out-file={}", out.display())];
    let (gateway, url) = crate::harness::start_gateway_wrapped(bin, config, &wrap).await?;
    let target = prepare(http, gateway, url, paths).await?;
    let pid = target.gateway.pid().to_string();
    let control = |what: &str| std::process::Command::new("callgrind_control").args([what, &pid]).output();
    let mut counts = Vec::new();
    let mut dumps = 0;
    // TASKGATE_BENCH_CALLGRIND_DIR keeps the dumps there, named by run and path (for
    // callgrind_annotate; run 0 is this build, run 1 a previous one).
    let kept = std::env::var_os("TASKGATE_BENCH_CALLGRIND_DIR").map(std::path::PathBuf::from);
    // The instructions since the last dump (a dump zeroes the counters).
    let mut dumped = |path: usize| -> Result<u64> {
        control("-d")?;
        dumps += 1;
        let dump = std::path::PathBuf::from(format!("{}.{dumps}", out.display()));
        let profile =
            std::fs::read_to_string(&dump).with_context(|| format!("no callgrind dump at {}", dump.display()))?;
        match &kept {
            Some(dir) => {
                let slug: String =
                    paths.names[path].chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
                let kept = dir.join(format!("refusal-{run}-{path:02}-{slug}-{dumps}.callgrind"));
                if std::fs::rename(&dump, &kept).is_err() {
                    let _ = std::fs::copy(&dump, &kept);
                    let _ = std::fs::remove_file(&dump);
                }
            }
            None => {
                let _ = std::fs::remove_file(&dump);
            }
        }
        profile
            .lines()
            .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
            .and_then(|t| t.trim().parse().ok())
            .context("no totals in the callgrind dump")
    };
    for i in 0..paths.credentials.len() {
        control("-z")?;
        if paths.floods[i].is_none() {
            for k in 0..n {
                send(http, &target, paths, i, 1_000_000 + k).await?;
            }
            counts.push(dumped(i)? / n);
            continue;
        }
        // A flood under callgrind spans seconds, each with its share of checked refusals. The
        // client's share is spent at once (that many requests together, left out), then a
        // group of requests is measured between a zeroing and a dump: a group all answered 429
        // (unchecked, within that second) is kept, any other left out.
        let share = u64::from(taskgate_core::tenants::refused_tokens::PER_SOURCE);
        let (mut unchecked, mut instructions, mut k) = (0, 0, 0);
        for _ in 0..40 {
            if unchecked >= n.min(50) {
                break;
            }
            let spend = (k..k + share).map(|m| send(http, &target, paths, i, 1_000_000 + m));
            futures_util::future::try_join_all(spend).await?;
            k += share;
            control("-z")?;
            let mut all_unchecked = true;
            for _ in 0..GROUP {
                let status = send(http, &target, paths, i, 1_000_000 + k).await?;
                all_unchecked &= status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                k += 1;
            }
            let cost = dumped(i)?;
            if all_unchecked {
                (unchecked, instructions) = (unchecked + GROUP, instructions + cost);
            }
        }
        anyhow::ensure!(unchecked > 0 || !strict, "no group of {} was refused unchecked", paths.names[i]);
        counts.push(instructions.checked_div(unchecked).unwrap_or(0));
    }
    target.gateway.terminate().await;
    let _ = std::fs::remove_file(&out);
    Ok(counts)
}

/// Requests measured together in a flood, between a zeroing and a dump.
const GROUP: u64 = 5;

/// A number for each instruction run of this process.
fn paths_seq() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
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
    let http = reqwest::Client::new();
    let mut targets = vec![start_target(&http, bin, &config, &paths).await?];
    if let Some(old) = std::env::var_os("TASKGATE_BENCH_PREVIOUS") {
        targets.push(start_target(&http, Path::new(&old), &config, &paths).await?);
    }
    let mut measured = measure(&http, &targets, &paths, plan).await?.into_iter();
    let now = measured.next().expect("this build's figures");
    let previous = measured.next();
    for target in targets {
        target.gateway.terminate().await;
    }
    let counted = if crate::instructions::valgrind_installed() {
        let n = if plan.quick { 5 } else { 200 };
        let now = instructions(&http, bin, &config, &paths, (n, true)).await?;
        let previous = match std::env::var_os("TASKGATE_BENCH_PREVIOUS") {
            Some(old) => Some(instructions(&http, Path::new(&old), &config, &paths, (n, false)).await?),
            None => None,
        };
        Some((now, previous))
    } else {
        println!("(valgrind is not installed: no instruction counts)");
        None
    };
    let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
    // One table: each path's cost in CPU time and (with valgrind) instructions, against ping
    // with an API key and, given a previous build, against that build.
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let mut header = vec!["request", "gateway CPU per request", "against ping"];
    if previous.is_some() {
        header.extend(["CPU, previous build", "now / previous"]);
    }
    if let Some((_, old)) = &counted {
        header.extend(["instructions", "against ping"]);
        if old.is_some() {
            header.extend(["instructions, previous build", "now / previous"]);
        }
    }
    println!("| {} |", header.join(" | "));
    println!("|{}", " --- |".repeat(header.len()));
    // What a client can repeat without end (a refused JWT is checked 10 times a second per
    // client at most; its floods are), and a JWT's checked refusal.
    let checked_jwt = |i: usize| {
        paths.floods[i].is_none() && (paths.names[i].contains("JWT") || paths.names[i].contains("access token"))
    };
    let (mut repeatable, mut checked): ((f64, f64), (f64, f64)) = ((0.0, 0.0), (0.0, 0.0));
    for (i, name) in paths.names.iter().enumerate() {
        let time = ratio(now[i].as_secs_f64(), now[0].as_secs_f64());
        let mut row = vec![name.to_string(), us(now[i]), format!("{time:.2}")];
        if let Some(old) = &previous {
            row.extend([us(old[i]), format!("{:.2}", ratio(now[i].as_secs_f64(), old[i].as_secs_f64()))]);
        }
        let mut count = 0.0;
        if let Some((counts, old)) = &counted {
            count = ratio(counts[i] as f64, counts[0] as f64);
            row.extend([counts[i].to_string(), format!("{count:.2}")]);
            match old {
                Some(old) if old[i] == 0 => row.extend(["not measured (no clean group)".into(), "–".into()]),
                Some(old) => row.extend([old[i].to_string(), format!("{:.2}", ratio(counts[i] as f64, old[i] as f64))]),
                None => {}
            }
        }
        if i >= ACCEPTED {
            let worst = if checked_jwt(i) { &mut checked } else { &mut repeatable };
            *worst = (worst.0.max(time), worst.1.max(count));
        }
        println!("| {} |", row.join(" | "));
    }
    println!();
    // Instructions where counted (CPU time moves with the machine), else CPU time.
    let judged = if counted.is_some() { repeatable.1 } else { repeatable.0 };
    println!(
        "- the costliest refusal a client can repeat without end (no credentials, a wrong API key, an opaque token, a \
         flood of forged JWTs), against serving ping with an API key: {:.2} in CPU time, {:.2} in instructions \
         (target ≤ 1.0: {})",
        repeatable.0,
        repeatable.1,
        verdict(judged <= 1.0)
    );
    println!(
        "- a JWT's checked refusal (at most 10 a second per client), against ping: up to {:.2} in CPU time, {:.2} in \
         instructions (a forged signature's one public-key check)",
        checked.0, checked.1
    );
    println!();
    Ok(())
}
