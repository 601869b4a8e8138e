//! Tenants over HTTP: credentials (API keys, HS256 and RS256 JWTs), 401s, upstream visibility,
//! isolation of tasks and sessions, every limit (concurrent tasks, rates, ttl, pollInterval,
//! sessions, body), idle sessions, actor restarts and reloads.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::sign::Signer;
use reqwest::StatusCode;
use serde_json::{json, Value};
use taskgate_config::{ApiKeyConfig, Config, JwtAlgorithm, JwtConfig, Rate, TenantConfig};
use taskgate_core::clock::ManualClock;
use taskgate_core::tenants::hash_key;
use taskgate_protocol::ErrorObject;
use taskgate_testkit::{config_with, DemoUpstream, McpClient, TestGateway};

const HS_SECRET: &str = "globex-shared-secret-of-32-bytes!";

async fn within<F: std::future::Future>(event: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), event).await.expect("the awaited event did not happen within 30 s")
}

pub(crate) fn tenant(id: &str, keys: &[(&str, &str)]) -> TenantConfig {
    let mut t = TenantConfig::new(id);
    for (principal, key) in keys {
        t.api_keys.push(ApiKeyConfig { principal: (*principal).into(), sha256: hash_key(key) });
    }
    t
}

fn hs256_jwt() -> JwtConfig {
    JwtConfig {
        algorithm: JwtAlgorithm::HS256,
        secret: Some(HS_SECRET.into()),
        secret_env: None,
        public_key: None,
        public_key_file: None,
        audience: "taskgate".into(),
        issuer: Some("https://idp.globex.example".into()),
        principal_claim: "email".into(),
        tenant_claim: None,
        leeway_secs: 0,
    }
}

fn sign(header: &str, claims: &Value, key: &PKey<Private>) -> String {
    let signed = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let mut signer = Signer::new(MessageDigest::sha256(), key).unwrap();
    signer.update(signed.as_bytes()).unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signer.sign_to_vec().unwrap()))
}

fn hs256(claims: &Value) -> String {
    sign(r#"{"alg":"HS256","typ":"JWT"}"#, claims, &PKey::hmac(HS_SECRET.as_bytes()).unwrap())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Two tenants over two upstreams: "acme" (API keys for alice and bob) sees only "a";
/// "globex" (HS256 JWTs) sees both.
fn two_tenants(a: &DemoUpstream, b: &DemoUpstream) -> Config {
    let mut config = config_with(vec![a.upstream("a"), b.upstream("b")]);
    let mut acme = tenant("acme", &[("alice", "acme-alice-key-0001"), ("bob", "acme-bob-key-00002")]);
    acme.upstreams = Some(vec!["a".into()]);
    let mut globex = tenant("globex", &[]);
    globex.jwts.push(hs256_jwt());
    config.tenants = vec![acme, globex];
    config
}

fn globex_token(email: &str) -> String {
    hs256(&json!({"iss": "https://idp.globex.example", "aud": "taskgate", "email": email, "exp": now_secs() + 600}))
}

async fn create(c: &mut McpClient, tool: &str, args: Value) -> Result<Value, ErrorObject> {
    c.request("tools/call", Some(json!({"name": tool, "arguments": args, "task": {}}))).await.outcome()
}

fn task_id(created: &Value) -> String {
    created["task"]["taskId"].as_str().expect("a CreateTaskResult").to_owned()
}

async fn metric(gw: &TestGateway, line_start: &str) -> f64 {
    let text = gw.gateway.render_metrics().await;
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

#[actix_rt::test]
async fn bad_missing_or_expired_credentials_get_401_with_a_json_rpc_body() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let gw = TestGateway::start(two_tenants(&a, &b));
    let expired = hs256(
        &json!({"iss": "https://idp.globex.example", "aud": "taskgate", "email": "x@globex", "exp": now_secs() - 60}),
    );
    let wrong_aud = hs256(
        &json!({"iss": "https://idp.globex.example", "aud": "other", "email": "x@globex", "exp": now_secs() + 60}),
    );
    let claims =
        json!({"iss": "https://idp.globex.example", "aud": "taskgate", "email": "x@globex", "exp": now_secs() + 60});
    let forged = sign(r#"{"alg":"HS256"}"#, &claims, &PKey::hmac(b"not-the-secret-not-the-secret-not").unwrap());
    let cases: [(Option<&str>, &str); 6] = [
        (None, "send Authorization: Bearer"),
        (Some("not-a-key-anyone-has"), "API key is not valid"),
        (Some(&expired), "expired"),
        (Some(&wrong_aud), "audience"),
        (Some(&forged), "no configured issuer signed it"),
        (Some("a.b.c"), "not base64url JSON"),
    ];
    for (token, why) in cases {
        let mut c = match token {
            Some(t) => McpClient::with_bearer(&gw.url, t),
            None => McpClient::new(&gw.url),
        };
        let reply = c.try_initialize().await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{why}");
        let challenge = reply.headers.get("www-authenticate").unwrap().to_str().unwrap();
        assert!(challenge.starts_with("Bearer "), "{challenge}");
        let error = reply.outcome().unwrap_err();
        assert_eq!(error.code, -32004);
        assert!(error.message.contains(why), "{why}: {}", error.message);
        if let Some(t) = token {
            assert!(!error.message.contains(t), "the credential is never echoed");
        }
    }
    // "Basic" and empty bearer are malformed; GET and DELETE need credentials too.
    let reply = McpClient::new(&gw.url).post_raw("{}", &[("authorization", "Basic YTpi")]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let mut stranger = alice.clone();
    stranger.bearer = None;
    assert_eq!(stranger.open_stream().await.err(), Some(StatusCode::UNAUTHORIZED));
    assert_eq!(stranger.delete().await, StatusCode::UNAUTHORIZED);
    assert_eq!(metric(&gw, "taskgate_auth_failures_total{reason=\"token_expired\"}").await, 1.0);
    assert!(metric(&gw, "taskgate_auth_failures_total{reason=\"missing\"}").await >= 3.0);
    // A refusal keeps a small request's connection open: the next request on it is answered
    // (a flood of bad credentials costs no new connection each).
    let address = gw.url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer wrong-key-0000000000\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..2 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(socket.read(&mut byte).await.unwrap(), 1, "the connection stayed open");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 401") && !head.contains("connection: close"), "{head}");
        let length: usize =
            head.split("content-length: ").nth(1).unwrap().split("\r\n").next().unwrap().parse().unwrap();
        let mut rest = vec![0u8; length];
        socket.read_exact(&mut rest).await.unwrap();
    }
    // Good credentials of both kinds work.
    let mut globex = McpClient::with_bearer(&gw.url, &globex_token("carol@globex"));
    globex.initialize().await;
    assert!(globex.request("ping", None).await.outcome().is_ok());
}

#[actix_rt::test]
async fn rs256_tokens_name_the_tenant_from_a_claim() {
    let a = DemoUpstream::start();
    let private = PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let public = String::from_utf8(private.public_key_to_pem().unwrap()).unwrap();
    let mut config = config_with(vec![a.upstream("a")]);
    for id in ["north", "south"] {
        let mut t = TenantConfig::new(id);
        t.jwts.push(JwtConfig {
            algorithm: JwtAlgorithm::RS256,
            secret: None,
            public_key: Some(public.clone()),
            tenant_claim: Some("org".into()),
            principal_claim: "sub".into(),
            issuer: None,
            ..hs256_jwt()
        });
        config.tenants.push(t);
    }
    let gw = TestGateway::start(config);
    let token = |org: &str| {
        sign(
            r#"{"alg":"RS256"}"#,
            &json!({"sub": "dana", "org": org, "aud": "taskgate", "exp": now_secs() + 60}),
            &private,
        )
    };
    let mut north = McpClient::with_bearer(&gw.url, &token("north"));
    north.initialize().await;
    let created = create(&mut north, "a__echo", json!({"text": "hi"})).await.unwrap();
    // The same principal name in the other tenant is someone else.
    let mut south = McpClient::with_bearer(&gw.url, &token("south"));
    south.initialize().await;
    let listed = south.request("tasks/list", Some(json!({}))).await.outcome().unwrap();
    assert_eq!(listed["tasks"], json!([]));
    let own = north.request("tasks/list", Some(json!({}))).await.outcome().unwrap();
    assert_eq!(own["tasks"][0]["taskId"], created["task"]["taskId"]);
    let nowhere = McpClient::with_bearer(&gw.url, &token("initech")).try_initialize().await;
    assert_eq!(nowhere.status, StatusCode::UNAUTHORIZED);
}

#[actix_rt::test]
async fn a_tenant_sees_and_calls_only_its_own_upstreams() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let gw = TestGateway::start(two_tenants(&a, &b));
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let names = alice.tool_names().await;
    assert!(!names.is_empty() && names.iter().all(|n| n.starts_with("a__")), "{names:?}");
    let hidden = alice.call("b__echo", json!({"text": "x"})).await.unwrap_err();
    let missing = alice.call("zz__nothing", json!({})).await.unwrap_err();
    assert_eq!(hidden.code, missing.code);
    assert_eq!(hidden.message, "Unknown tool: b__echo", "exactly as for a tool that does not exist");
    assert_eq!(b.demo.stats().calls, 0, "nothing reached upstream b");
    let mut globex = McpClient::with_bearer(&gw.url, &globex_token("carol@globex"));
    globex.initialize().await;
    let names = globex.tool_names().await;
    assert!(names.iter().any(|n| n.starts_with("a__")) && names.iter().any(|n| n.starts_with("b__")));
    assert!(globex.call("b__echo", json!({"text": "x"})).await.is_ok());
}

#[actix_rt::test]
async fn tasks_and_sessions_are_invisible_to_other_tenants_and_principals() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let gw = TestGateway::start(two_tenants(&a, &b));
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let id = task_id(&create(&mut alice, "a__echo", json!({"text": "secret"})).await.unwrap());
    alice.request("tasks/result", Some(json!({"taskId": id}))).await.outcome().unwrap();
    let mut bob = McpClient::with_bearer(&gw.url, "acme-bob-key-00002");
    bob.initialize().await;
    let mut carol = McpClient::with_bearer(&gw.url, &globex_token("carol@globex"));
    carol.initialize().await;
    let unknown = bob
        .request("tasks/get", Some(json!({"taskId": "00000000-0000-4000-8000-000000000000"})))
        .await
        .outcome()
        .unwrap_err();
    for other in [&mut bob, &mut carol] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let refused = other.request(method, Some(json!({"taskId": id}))).await.outcome().unwrap_err();
            assert_eq!(refused, unknown, "{method}: exactly the answer for an unknown id");
        }
        let listed = other.request("tasks/list", Some(json!({}))).await.outcome().unwrap();
        assert_eq!(listed["tasks"], json!([]));
    }
    // The task is untouched, and still alice's.
    let task = alice.request("tasks/get", Some(json!({"taskId": id}))).await.outcome().unwrap();
    assert_eq!(task["status"], "completed");
    // Alice's session id with bob's or carol's credentials is a session that does not exist.
    let mut lost = bob.clone();
    lost.session = Some("no-such-session".into());
    let unknown_session = lost.request("ping", None).await;
    for token in ["acme-bob-key-00002".to_string(), globex_token("carol@globex")] {
        let mut thief = alice.clone();
        thief.bearer = Some(token);
        let reply = thief.request("ping", None).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        assert_eq!(reply.outcome().unwrap_err(), unknown_session.outcome().unwrap_err());
        assert_eq!(thief.open_stream().await.err(), Some(StatusCode::NOT_FOUND));
        assert_eq!(thief.delete().await, StatusCode::NOT_FOUND);
    }
    assert!(alice.request("ping", None).await.outcome().is_ok(), "alice's session survived the attempts");
    assert_eq!(metric(&gw, "taskgate_task_lookup_failures_total{tenant=\"acme\"}").await, 4.0);
    assert_eq!(metric(&gw, "taskgate_task_lookup_failures_total{tenant=\"globex\"}").await, 3.0);
}

/// A tenant with caps: 3 tasks at once, 2 per principal.
fn capped(a: &DemoUpstream, native: &DemoUpstream) -> Config {
    let mut config = config_with(vec![a.upstream("a"), native.upstream("n")]);
    let mut acme = tenant(
        "acme",
        &[("alice", "acme-alice-key-0001"), ("bob", "acme-bob-key-00002"), ("eve", "acme-eve-key-000003")],
    );
    acme.limits.max_concurrent_tasks = Some(3);
    acme.limits.max_concurrent_tasks_per_principal = Some(2);
    config.tenants = vec![acme, tenant("other", &[("olga", "other-olga-key-0001")])];
    config
}

#[actix_rt::test]
async fn concurrency_caps_refuse_tasks_with_a_clear_error_and_create_nothing() {
    let (a, native) = (DemoUpstream::start(), DemoUpstream::start_with_tasks());
    let gw = TestGateway::start(capped(&a, &native));
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let mut bob = McpClient::with_bearer(&gw.url, "acme-bob-key-00002");
    bob.initialize().await;
    let mut eve = McpClient::with_bearer(&gw.url, "acme-eve-key-000003");
    eve.initialize().await;
    let first = task_id(&create(&mut alice, "a__wait", json!({"gate": "g1"})).await.unwrap());
    // A native task counts the same.
    create(&mut alice, "n__wait", json!({"gate": "g2"})).await.unwrap();
    let per_principal = create(&mut alice, "a__wait", json!({"gate": "g1"})).await.unwrap_err();
    assert_eq!(per_principal.code, -32006);
    assert!(per_principal.message.contains("principal \"key:alice\"") && per_principal.message.contains("2 tasks"));
    create(&mut bob, "a__wait", json!({"gate": "g1"})).await.unwrap();
    let per_tenant = create(&mut eve, "n__wait", json!({"gate": "g2"})).await.unwrap_err();
    assert_eq!(per_tenant.code, -32006);
    assert!(per_tenant.message.contains("tenant \"acme\"") && per_tenant.message.contains("3 tasks"));
    // Nothing was created for the refusals: the upstreams saw three calls, the store three tasks.
    let listed = eve.request("tasks/list", Some(json!({}))).await.outcome().unwrap();
    assert_eq!(listed["tasks"], json!([]));
    assert_eq!(gw.gateway.stored_tasks(), 3);
    // Plain calls are not tasks, and another tenant is not affected.
    assert!(eve.call("a__echo", json!({"text": "still fine"})).await.is_ok());
    let mut olga = McpClient::with_bearer(&gw.url, "other-olga-key-0001");
    olga.initialize().await;
    create(&mut olga, "a__echo", json!({"text": "x"})).await.unwrap();
    // When a task ends its place is free at once: the answer to tasks/result comes after.
    a.demo.release("g1");
    within(alice.request("tasks/result", Some(json!({"taskId": first})))).await.outcome().unwrap();
    create(&mut eve, "a__echo", json!({"text": "now"})).await.unwrap();
    assert_eq!(
        metric(&gw, "taskgate_admission_rejected_total{reason=\"max_concurrent_tasks\",tenant=\"acme\"}").await,
        1.0
    );
    native.demo.release("g2");
}

fn rated(a: &DemoUpstream) -> Config {
    let mut config = config_with(vec![a.upstream("a")]);
    let mut acme = tenant("acme", &[("alice", "acme-alice-key-0001"), ("bob", "acme-bob-key-00002")]);
    acme.limits.rate = Some(Rate { per_second: 1.0, burst: 8 });
    acme.limits.principal_rate = Some(Rate { per_second: 1.0, burst: 5 });
    acme.limits.poll_rate = Some(Rate { per_second: 2.0, burst: 3 });
    config.tenants = vec![acme, tenant("calm", &[("carl", "calm-carl-key-00001")])];
    config
}

#[actix_rt::test]
async fn rates_answer_429_with_retry_after_and_polling_has_its_own_bucket() {
    let a = DemoUpstream::start();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let gw = TestGateway::start_with_clock(rated(&a), clock.clone());
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await; // 1 (notifications are not counted)
    for _ in 0..4 {
        assert!(alice.request("ping", None).await.outcome().is_ok());
    }
    // Alice's own burst of 5 is spent: 429, Retry-After, and a JSON-RPC error with the id.
    let reply = alice.request("ping", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    let error = reply.outcome().unwrap_err();
    assert_eq!(error.code, -32005);
    assert!(error.message.contains("principal \"key:alice\"") && error.message.contains("limits.principal_rate"));
    assert_eq!(error.data.unwrap()["retryAfterMs"], 1000);
    assert!(!matches!(reply.response(), taskgate_protocol::Message::Error { id: None, .. }), "the id is kept");
    // Polling is counted apart: three tasks/list pass while requests are refused, then 429.
    for _ in 0..3 {
        assert!(alice.request("tasks/list", Some(json!({}))).await.outcome().is_ok());
    }
    let polled = alice.request("tasks/get", Some(json!({"taskId": "x"}))).await;
    assert_eq!(polled.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(polled.outcome().unwrap_err().message.contains("polls"));
    // Bob has his own principal bucket, until the tenant's burst of 8 is spent.
    let mut bob = McpClient::with_bearer(&gw.url, "acme-bob-key-00002");
    bob.initialize().await;
    assert!(bob.request("ping", None).await.outcome().is_ok());
    assert!(bob.request("ping", None).await.outcome().is_ok());
    let tenant_wide = bob.request("ping", None).await.outcome().unwrap_err();
    assert!(tenant_wide.message.contains("tenant \"acme\""), "{}", tenant_wide.message);
    // Another tenant is untouched.
    let mut carl = McpClient::with_bearer(&gw.url, "calm-carl-key-00001");
    carl.initialize().await;
    assert!(carl.request("ping", None).await.outcome().is_ok());
    // Waiting as told is enough: the clock moves one second, one request each is admitted.
    clock.advance(1000);
    assert!(alice.request("ping", None).await.outcome().is_ok());
    assert_eq!(alice.request("ping", None).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(metric(&gw, "taskgate_rate_limited_total{reason=\"principal_rate\",tenant=\"acme\"}").await, 2.0);
    assert_eq!(metric(&gw, "taskgate_rate_limited_total{reason=\"tenant_poll_rate\",tenant=\"acme\"}").await, 1.0);
}

#[actix_rt::test]
async fn a_flooding_tenant_does_not_stop_another_one() {
    let a = DemoUpstream::start();
    let mut config = rated(&a);
    config.tenants[0].limits.max_concurrent_tasks = Some(5);
    let gw = TestGateway::start(config);
    let mut calm = McpClient::with_bearer(&gw.url, "calm-carl-key-00001");
    calm.initialize().await;
    // Eight flooding clients of one tenant, 50 requests each, at once: calls, tasks and polls.
    let flood: Vec<_> = (0..8)
        .map(|i| {
            let url = gw.url.clone();
            actix_rt::spawn(async move {
                let mut c =
                    McpClient::with_bearer(&url, if i % 2 == 0 { "acme-alice-key-0001" } else { "acme-bob-key-00002" });
                let (mut refused, mut ok) = (0, 0);
                let init = c.try_initialize().await;
                if init.status != StatusCode::OK {
                    return (50, 0);
                }
                c.session = init.headers.get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
                c.protocol_version = Some("2025-11-25".into());
                for n in 0..50 {
                    let reply = match n % 3 {
                        0 => {
                            c.request(
                                "tools/call",
                                Some(json!({"name": "a__wait", "arguments": {"gate": "never"}, "task": {}})),
                            )
                            .await
                        }
                        1 => c.request("tasks/list", Some(json!({}))).await,
                        _ => c.request("ping", None).await,
                    };
                    if reply.status == StatusCode::OK && reply.outcome().is_ok() {
                        ok += 1
                    } else {
                        refused += 1
                    }
                }
                (refused, ok)
            })
        })
        .collect();
    // Meanwhile the calm tenant's calls and tasks all succeed.
    for n in 0..20 {
        let text = format!("calm {n}");
        let result = calm.call("a__echo", json!({"text": text})).await.unwrap();
        assert_eq!(result["content"][0]["text"], text);
    }
    let calm_task = task_id(&create(&mut calm, "a__echo", json!({"text": "t"})).await.unwrap());
    assert!(calm.request("tasks/result", Some(json!({"taskId": calm_task}))).await.outcome().is_ok());
    let mut refused = 0;
    for f in flood {
        refused += within(f).await.unwrap().0;
    }
    assert!(refused > 300, "the flood was mostly refused ({refused} of 400)");
    a.demo.release("never");
}

#[actix_rt::test]
async fn ttl_poll_interval_sessions_and_body_follow_the_tenant_limits() {
    let a = DemoUpstream::start();
    let mut config = config_with(vec![a.upstream("a")]);
    let mut small = tenant("small", &[("sam", "small-sam-key-00001")]);
    small.limits.max_ttl_ms = Some(5000);
    small.limits.default_ttl_ms = Some(2000);
    small.limits.poll_interval_ms = Some(250);
    small.limits.max_sessions = Some(2);
    small.limits.max_body_bytes = Some(2048);
    config.tenants = vec![small, tenant("big", &[("bo", "big-bo-key-0000001")])];
    let gw = TestGateway::start(config);
    let mut sam = McpClient::with_bearer(&gw.url, "small-sam-key-00001");
    sam.initialize().await;
    let capped = create_with_ttl(&mut sam, Some(999_999)).await;
    assert_eq!((capped["ttl"].as_u64(), capped["pollInterval"].as_u64()), (Some(5000), Some(250)));
    assert_eq!(create_with_ttl(&mut sam, None).await["ttl"], 2000);
    let mut bo = McpClient::with_bearer(&gw.url, "big-bo-key-0000001");
    bo.initialize().await;
    let theirs = create_with_ttl(&mut bo, Some(999_999)).await;
    assert_eq!((theirs["ttl"].as_u64(), theirs["pollInterval"].as_u64()), (Some(999_999), Some(1000)));
    // Two sessions at most: the third is refused until one ends.
    let mut second = McpClient::with_bearer(&gw.url, "small-sam-key-00001");
    second.initialize().await;
    let third = McpClient::with_bearer(&gw.url, "small-sam-key-00001").try_initialize().await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    let error = third.outcome().unwrap_err();
    assert!(error.code == -32006 && error.message.contains("2 sessions"), "{error:?}");
    // The refusal says when a session may free: the longest-idle one's idle timeout (30 min).
    let retry: u64 = third.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=1800).contains(&retry), "{retry}");
    assert!(error.data.unwrap()["retryAfterMs"].as_u64().unwrap() > 1000);
    assert_eq!(second.delete().await, StatusCode::OK);
    McpClient::with_bearer(&gw.url, "small-sam-key-00001").initialize().await;
    // A 3000-byte body is too large for "small" only.
    let big_text = "x".repeat(3000);
    let params = json!({"name": "a__echo", "arguments": {"text": big_text}});
    let too_large = sam.request("tools/call", Some(params.clone())).await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(too_large.outcome().unwrap_err().message.contains("2048 bytes"));
    assert!(bo.request("tools/call", Some(params)).await.outcome().is_ok());
}

async fn create_with_ttl(c: &mut McpClient, ttl: Option<u64>) -> Value {
    let task = ttl.map_or(json!({}), |t| json!({"ttl": t}));
    let created =
        c.request("tools/call", Some(json!({"name": "a__echo", "arguments": {"text": "t"}, "task": task}))).await;
    created.outcome().unwrap()["task"].clone()
}

#[actix_rt::test]
async fn idle_sessions_are_closed_and_their_tasks_live_on() {
    let a = DemoUpstream::start();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut config = config_with(vec![a.upstream("a")]);
    config.server.session_idle_timeout_secs = 60;
    config.tenants = vec![tenant("acme", &[("alice", "acme-alice-key-0001")])];
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let mut idle = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    idle.initialize().await;
    let id = task_id(&create(&mut idle, "a__wait", json!({"gate": "g"})).await.unwrap());
    let mut listening = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    listening.initialize().await;
    let _stream = listening.open_stream().await.unwrap();
    let mut active = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    active.initialize().await;
    clock.advance(59_000);
    active.request("ping", None).await;
    gw.gateway.expire_idle_sessions().await;
    assert_eq!(gw.gateway.session_count(), 3, "nothing is idle for 60 s yet");
    clock.advance(2_000);
    gw.gateway.expire_idle_sessions().await;
    // The idle one is gone; one with its GET stream open and one seen 2 s ago stay.
    assert_eq!(idle.request("ping", None).await.status, StatusCode::NOT_FOUND);
    assert!(listening.request("ping", None).await.outcome().is_ok());
    assert!(active.request("ping", None).await.outcome().is_ok());
    // The task outlives its session: its requestor finds it from another.
    a.demo.release("g");
    let result = within(active.request("tasks/result", Some(json!({"taskId": id})))).await.outcome().unwrap();
    assert_eq!(result["content"][0]["text"], "gate g opened");
    assert_eq!(metric(&gw, "taskgate_sessions_expired_total{tenant=\"acme\"}").await, 1.0);
}

#[actix_rt::test]
async fn a_crashed_task_actor_is_restarted_from_the_store_without_losing_the_task() {
    let (a, native) = (DemoUpstream::start(), DemoUpstream::start_with_tasks());
    let mut config = config_with(vec![a.upstream("a"), native.upstream("n")]);
    config.tenants = vec![{
        let mut t = tenant("acme", &[("alice", "acme-alice-key-0001")]);
        t.limits.max_concurrent_tasks = Some(2);
        t
    }];
    let gw = TestGateway::start(config);
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let wrapped = task_id(&create(&mut alice, "a__wait", json!({"gate": "w"})).await.unwrap());
    let followed = task_id(&create(&mut alice, "n__wait", json!({"gate": "n"})).await.unwrap());
    // A requestor waits in tasks/result while the actor crashes.
    let mut waiter = alice.clone();
    let params = json!({"taskId": wrapped});
    let waiting = actix_rt::spawn(async move { waiter.request("tasks/result", Some(params)).await });
    within(async {
        while metric(&gw, "taskgate_task_result_waiters{tenant=\"acme\"}").await != 1.0 {
            alice.request("ping", None).await;
        }
    })
    .await;
    assert_eq!(metric(&gw, "taskgate_task_result_waiters{tenant=\"acme\"}").await, 1.0);
    for id in [&wrapped, &followed] {
        assert!(gw.gateway.crash_task_actor(id).await);
    }
    let restarted = |id: &str| gw.gateway.task_actor_alive(id);
    // Bounded by time, not by a count of pings: under load a restart (a store read) may take
    // longer than a thousand pings.
    within(async {
        while !(restarted(&wrapped) && restarted(&followed)) {
            alice.request("ping", None).await;
        }
    })
    .await;
    assert!(restarted(&wrapped) && restarted(&followed), "both actors were restarted");
    // The state survived: status, owner, the cap's count (a third task is still refused).
    let task = alice.request("tasks/get", Some(json!({"taskId": wrapped}))).await.outcome().unwrap();
    assert_eq!(task["status"], "working");
    assert_eq!(create(&mut alice, "a__echo", json!({"text": "x"})).await.unwrap_err().code, -32006);
    // The upstream call kept running: its outcome reaches the waiter and the store.
    a.demo.release("w");
    let result = within(waiting).await.unwrap().outcome().unwrap();
    assert_eq!(result["content"][0]["text"], "gate w opened");
    native.demo.release("n");
    let done = within(alice.request("tasks/result", Some(json!({"taskId": followed})))).await.outcome().unwrap();
    assert_eq!(done["content"][0]["text"], "gate n opened");
    assert_eq!(metric(&gw, "taskgate_actor_restarts_total{reason=\"task_actor_crashed\"}").await, 2.0);
    // Both places under the cap are free again.
    create(&mut alice, "a__echo", json!({"text": "x"})).await.unwrap();
}

#[actix_rt::test]
async fn a_reload_changes_limits_and_credentials_for_new_requests_and_keeps_sessions_and_tasks() {
    let a = DemoUpstream::start();
    let mut config = config_with(vec![a.upstream("a")]);
    config.tenants = vec![tenant("acme", &[("alice", "acme-alice-key-0001")])];
    let gw = TestGateway::start(config.clone());
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    let id = task_id(&create(&mut alice, "a__wait", json!({"gate": "r"})).await.unwrap());
    // New limit and a new key.
    let mut next = config.clone();
    next.tenants[0].limits.max_concurrent_tasks = Some(1);
    next.tenants[0].api_keys.push(ApiKeyConfig { principal: "ci".into(), sha256: hash_key("acme-ci-key-000001") });
    gw.gateway.reload(&next).unwrap();
    let refused = create(&mut alice, "a__echo", json!({"text": "x"})).await.unwrap_err();
    assert_eq!(refused.code, -32006, "the new cap counts the task created before the reload");
    McpClient::with_bearer(&gw.url, "acme-ci-key-000001").initialize().await;
    // An invalid configuration is refused whole; the running one stays.
    let mut broken = next.clone();
    broken.tenants[0].limits.rate = Some(Rate { per_second: -1.0, burst: 0 });
    broken.tenants[0].api_keys.clear();
    let problems = gw.gateway.reload(&broken).unwrap_err();
    assert!(problems.iter().any(|p| p.location.contains("limits.rate")), "{problems:?}");
    McpClient::with_bearer(&gw.url, "acme-ci-key-000001").initialize().await;
    // The session and the task lived through both.
    a.demo.release("r");
    let done = within(alice.request("tasks/result", Some(json!({"taskId": id})))).await.outcome().unwrap();
    assert_eq!(done["content"][0]["text"], "gate r opened");
    assert_eq!(metric(&gw, "taskgate_config_reloads_total{outcome=\"applied\"}").await, 1.0);
    assert_eq!(metric(&gw, "taskgate_config_reloads_total{outcome=\"rejected\"}").await, 1.0);
}

#[actix_rt::test]
async fn equal_principal_names_from_an_api_key_and_a_token_are_two_requestors() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let mut config = config_with(vec![a.upstream("a"), b.upstream("b")]);
    // One tenant, an API key whose principal is "x-user" and tokens whose email is "x-user".
    let mut globex = tenant("globex", &[("x-user", "globex-x-user-key-01")]);
    globex.jwts.push(hs256_jwt());
    config.tenants = vec![globex];
    let gw = TestGateway::start(config);
    let mut by_key = McpClient::with_bearer(&gw.url, "globex-x-user-key-01");
    by_key.initialize().await;
    let mut by_token = McpClient::with_bearer(&gw.url, &globex_token("x-user"));
    by_token.initialize().await;
    let task = task_id(&create(&mut by_key, "a__echo", json!({"text": "key's"})).await.unwrap());
    let theirs = by_token.request("tasks/result", Some(json!({"taskId": task}))).await.outcome();
    assert_eq!(theirs.unwrap_err().message, "Failed to retrieve task: Task not found");
    let listed = by_token.request("tasks/list", None).await.outcome().unwrap();
    assert_eq!(listed["tasks"], json!([]));
    // The key's own principal still reads it.
    let mine = by_key.request("tasks/result", Some(json!({"taskId": task}))).await.outcome().unwrap();
    assert_eq!(mine["content"][0]["text"], "key's");
}

/// `limits.at_max_sessions = "reclaim_idle"`: a principal at its tenant's session cap gets a new
/// session in place of its own longest-idle one; a session holding something (a GET stream) and
/// another principal's sessions are never taken, and then the cap refuses with `Retry-After`.
#[actix_rt::test]
async fn at_its_session_cap_a_principal_may_reclaim_its_own_longest_idle_session() {
    let a = DemoUpstream::start();
    let mut config = config_with(vec![a.upstream("a")]);
    let mut small = tenant("small", &[("sam", "small-sam-key-00001"), ("sue", "small-sue-key-00001")]);
    small.limits.max_sessions = Some(3);
    small.limits.at_max_sessions = Some(taskgate_config::SessionCapPolicy::ReclaimIdle);
    config.tenants = vec![small];
    let clock = std::sync::Arc::new(taskgate_core::clock::ManualClock::new(1_000_000));
    let gw = TestGateway::start_with_clock(config, clock.clone());
    let key = "small-sam-key-00001";
    let mut oldest = McpClient::with_bearer(&gw.url, key);
    oldest.initialize().await;
    clock.advance(1000);
    let mut newer = McpClient::with_bearer(&gw.url, key);
    newer.initialize().await;
    clock.advance(1000);
    let mut sue = McpClient::with_bearer(&gw.url, "small-sue-key-00001");
    sue.initialize().await;
    clock.advance(1000);

    // At the cap: sam's longest-idle session makes room; sue's, older than none of sam's, stays.
    let mut third = McpClient::with_bearer(&gw.url, key);
    third.initialize().await;
    assert_eq!(oldest.request("ping", None).await.status, StatusCode::NOT_FOUND);
    for client in [&mut newer, &mut sue, &mut third] {
        assert!(client.request("ping", None).await.outcome().is_ok());
    }
    assert_eq!(metric(&gw, "taskgate_sessions_reclaimed_total{tenant=\"small\"}").await, 1.0);

    // Sessions with a GET stream open hold something: none is taken, and the cap refuses.
    let _newer_stream = newer.open_stream().await.unwrap();
    let _third_stream = third.open_stream().await.unwrap();
    let refused = McpClient::with_bearer(&gw.url, key).try_initialize().await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(sue.request("ping", None).await.status, StatusCode::OK, "another principal's session is not taken");
}

/// A tenant's tool rules: a tool they leave out is absent from its `tools/list` and refused on
/// `tools/call`, plain or as a task, with exactly the answer an unknown tool gets.
#[actix_rt::test]
async fn tools_a_tenant_may_not_call_are_unknown_to_it() {
    let demo = DemoUpstream::start();
    let mut config = config_with(vec![demo.upstream("demo"), taskgate_testkit::stdio_demo_upstream("local")]);
    let mut acme = tenant("acme", &[("ci", "acme-tools-key-000000001")]);
    acme.tools = Some(taskgate_config::ToolRules {
        allow: vec!["demo__*".into()],
        deny: vec!["demo__sl?w".into()],
        ..Default::default()
    });
    config.tenants = vec![acme, tenant("globex", &[("ci", "globex-tools-key-0000001")])];
    let gw = TestGateway::start(config);
    let mut acme = McpClient::with_bearer(&gw.url, "acme-tools-key-000000001");
    acme.initialize().await;
    let listed = acme.tool_names().await;
    assert!(listed.iter().any(|t| t == "demo__echo"), "{listed:?}");
    assert!(!listed.iter().any(|t| t == "demo__slow" || t.starts_with("local__")), "{listed:?}");
    let unknown = |e: ErrorObject, name: &str| {
        assert_eq!((e.code, e.message.as_str()), (-32602, format!("Unknown tool: {name}").as_str()), "{e:?}");
    };
    for name in ["demo__slow", "local__echo", "demo__no_such_tool"] {
        unknown(acme.call(name, json!({"ms": 1, "text": "x"})).await.unwrap_err(), name);
        let as_task = acme
            .request("tools/call", Some(json!({"name": name, "arguments": {"ms": 1}, "task": {"ttl": 60000}})))
            .await
            .outcome()
            .unwrap_err();
        unknown(as_task, name);
    }
    assert_eq!(acme.call("demo__echo", json!({"text": "allowed"})).await.unwrap()["content"][0]["text"], "allowed");
    // Another tenant's rules are its own.
    let mut globex = McpClient::with_bearer(&gw.url, "globex-tools-key-0000001");
    globex.initialize().await;
    let listed = globex.tool_names().await;
    assert!(listed.iter().any(|t| t == "demo__slow") && listed.iter().any(|t| t.starts_with("local__")), "{listed:?}");
}

#[actix_rt::test]
async fn a_client_that_had_its_share_of_tokens_refused_gets_the_rest_refused_unchecked() {
    let (a, b) = (DemoUpstream::start(), DemoUpstream::start());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let gw = TestGateway::start_with_clock(two_tenants(&a, &b), clock.clone());
    let claims = |who: &str| json!({"iss": "https://idp.globex.example", "aud": "taskgate", "email": format!("{who}@globex"), "exp": now_secs() + 600});
    // A valid token not yet seen. (Only OAuth access tokens verified lately, which the gateway
    // keeps, pass without a check; a configured JWT is checked each time.)
    let fresh = hs256(&claims("fresh"));
    let forged = |n: usize| {
        sign(
            r#"{"alg":"HS256"}"#,
            &claims(&format!("forger{n}")),
            &PKey::hmac(b"not-the-secret-not-the-secret-not").unwrap(),
        )
    };
    let message = |reply: &taskgate_testkit::Reply| reply.outcome().unwrap_err().message;
    // Each of the client's first ten forged tokens is checked, and refused for its signature.
    for n in 0..taskgate_core::tenants::refused_tokens::PER_SOURCE as usize {
        let reply = McpClient::with_bearer(&gw.url, &forged(n)).try_initialize().await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert!(message(&reply).contains("no configured issuer signed it"), "{}", message(&reply));
    }
    // The rest of this second: 429 until the next second, unchecked, saying why.
    let reply = McpClient::with_bearer(&gw.url, &forged(99)).try_initialize().await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    assert!(message(&reply).contains("tokens refused this second"), "{}", message(&reply));
    let unchecked = McpClient::with_bearer(&gw.url, &fresh).try_initialize().await;
    assert_eq!(unchecked.status, StatusCode::TOO_MANY_REQUESTS, "a new token waits for the next second");
    assert_eq!(metric(&gw, "taskgate_auth_failures_total{reason=\"refused_tokens\"}").await, 2.0);
    // API keys are not JWTs: never held back by it.
    let mut alice = McpClient::with_bearer(&gw.url, "acme-alice-key-0001");
    alice.initialize().await;
    // The next second, the new token is checked, and passes.
    clock.advance(1000);
    assert_eq!(McpClient::with_bearer(&gw.url, &fresh).try_initialize().await.status, StatusCode::OK);
}
