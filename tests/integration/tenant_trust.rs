//! Trust kept apart between tenants, tried as an attacker would against real authorization
//! servers (two oidc-provider instances): a token of one tenant presented as another's, an
//! opaque token that must reach its own server only, a caller dropping its token to skip scope
//! checks, an authorization server answering a 100 MiB key set, and a flood of unknown key ids.

use serde_json::{json, Value};
use taskgate_testkit::{DemoUpstream, McpClient, ServedGateway};

use crate::oauth::{initialize, AuthServer};
use crate::support::free_port;

/// A gateway in front of the demo upstream with `tenants` (TOML), at its public URL; `Err`
/// holds what it said when it refused to start.
async fn gateway(
    tenants: &str,
    env: &[(&str, &str)],
) -> Result<(ServedGateway, String, DemoUpstream, tempfile::TempDir), String> {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/mcp");
    let text = format!(
        // The floods below open a connection each, at once.
        "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{public_url}\"\nmax_connections_per_peer = 256\n\
         [store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n{tenants}",
        demo.http.url
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    let gw = if env.is_empty() {
        ServedGateway::try_start(&file).await?
    } else {
        ServedGateway::start_with_env(&file, env).await
    };
    Ok((gw, public_url, demo, dir))
}

/// An access token of `issuer` for `audience` naming the key `kid`, signed by a key nobody
/// published.
fn forged_es256(issuer: &str, audience: &str, kid: &str) -> String {
    let claims = json!({"iss": issuer, "aud": audience, "sub": "mallory", "exp": now() + 300});
    taskgate_testkit::jwt::Es256Key::generate(kid).sign(json!({"alg": "ES256", "typ": "at+jwt", "kid": kid}), claims)
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[actix_rt::test]
async fn a_token_never_logs_in_to_a_tenant_it_was_not_issued_for() {
    let a = AuthServer::start();
    // Two tenants trust one issuer for one audience, one leaving it to public_url and the
    // other writing it with a trailing slash: every token would log in to either. Refused.
    let tenants = |second_audience: &str, claims: &str| {
        format!(
            "[[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{iss}\"\n{claims}\
             [[tenant]]\nid = \"globex\"\nupstreams = []\n[[tenant.oauth]]\nissuer = \"{iss}\"\naudience = \"{second_audience}\"\n{claims}",
            iss = a.issuer
        )
    };
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/mcp");
    let file = dir.path().join("taskgate.toml");
    let write = |tenants: String| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{public_url}\"\n[store]\nbackend = \"memory\"\n\
             [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n{tenants}",
            demo.http.url
        );
        std::fs::write(&file, text).unwrap();
    };
    write(tenants(&format!("{}/", public_url.replace("http://", "HTTP://")), ""));
    let said = ServedGateway::try_start(&file).await.err().expect("the configuration is refused");
    assert!(said.contains("tenant_claim"), "{said}");
    // With one tenant_claim on both, it serves; a token names its tenant.
    write(tenants(&public_url, "tenant_claim = \"org\"\n"));
    let gw = ServedGateway::start(&file).await;
    let signed = |claims: Value| a.sign(json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}), claims);
    let claims = |aud: Value, org: Option<&str>| {
        let mut c = json!({"iss": a.issuer, "aud": aud, "sub": "mallory", "exp": now() + 300});
        if let Some(org) = org {
            c["org"] = json!(org);
        }
        c
    };
    let (status, _, body) = initialize(&public_url, Some(&signed(claims(json!(public_url), Some("globex"))))).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = initialize(&public_url, Some(&signed(claims(json!(public_url), None)))).await;
    assert_eq!(status, 401, "a token naming no tenant is no tenant's");
    assert_eq!(body["id"], 1, "the refused request's id: {body}");
    // A gateway that takes only access tokens asks for one, never for an API key.
    let (status, _, body) = initialize(&public_url, None).await;
    assert_eq!(status, 401);
    let said = body["error"]["message"].as_str().unwrap();
    assert!(said.contains("access token") && !said.contains("API key"), "{said}");
    let (_, _, body) = initialize(&public_url, Some("not-a-key")).await;
    assert!(!body["error"]["message"].as_str().unwrap().contains("API key"), "{body}");
    gw.kill().await;
    // Two audiences of one issuer, one a tenant: a token naming both is refused, never
    // resolved by the order tenants are listed in.
    let other = "https://other.example/mcp";
    write(tenants(other, ""));
    let gw = ServedGateway::start(&file).await;
    let (status, _, body) = initialize(&public_url, Some(&signed(claims(json!([public_url, other]), None)))).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.to_string().contains("more than one tenant"), "{body}");
    let (status, _, body) = initialize(&public_url, Some(&signed(claims(json!(other), None)))).await;
    assert_eq!(status, 200, "globex's own audience: {body}");
    gw.kill().await;
}

#[actix_rt::test]
async fn an_opaque_token_reaches_its_own_authorization_server_only_and_an_api_key_none() {
    let (a, b) = (AuthServer::with_opaque_prefix("a_at_"), AuthServer::with_opaque_prefix("b_at_"));
    let key = "acme-api-key-never-introspected-01";
    let tenants = format!(
        "[[tenant]]\nid = \"acme\"\n[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{}\"\n\
         [[tenant.oauth]]\nissuer = \"{}\"\nintrospection_client_id = \"gateway-introspector\"\n\
         introspection_secret_env = \"TG_SECRET\"\nopaque_token_prefix = \"a_at_\"\n\
         [[tenant]]\nid = \"globex\"\nupstreams = []\n[[tenant.oauth]]\nissuer = \"{}\"\n\
         introspection_client_id = \"gateway-introspector\"\nintrospection_secret_env = \"TG_SECRET\"\n\
         opaque_token_prefix = \"b_at_\"\n",
        taskgate_core::tenants::hash_key(key),
        a.issuer,
        b.issuer
    );
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[("TG_SECRET", "secret-3")]).await.unwrap();
    let a_token = a.token("opaque-client", "secret-4", "mcp", &public_url).await;
    let b_token = b.token("opaque-client", "secret-4", "mcp", &public_url).await;
    assert!(a_token.starts_with("a_at_") && b_token.starts_with("b_at_"), "{a_token} {b_token}");
    let mut acme = McpClient::with_bearer(&public_url, &a_token);
    acme.initialize().await;
    assert!(acme.tool_names().await.iter().any(|t| t == "demo__echo"));
    assert_eq!(b.counts().await.0, 0, "acme's token never reached globex's authorization server");
    let mut globex = McpClient::with_bearer(&public_url, &b_token);
    globex.initialize().await;
    assert!(globex.tool_names().await.is_empty(), "globex's token is globex's");
    let (a_asked, b_asked) = (a.counts().await.0, b.counts().await.0);
    assert_eq!((a_asked, b_asked), (1, 1), "each token asked about once, at its own server");
    // An unknown API key (or a revoked one) is sent nowhere.
    for unknown in ["acme-api-key-revoked-000000001", "anything-else"] {
        let (status, _, body) = initialize(&public_url, Some(unknown)).await;
        assert_eq!(status, 401, "{body}");
    }
    assert_eq!((a.counts().await.0, b.counts().await.0), (a_asked, b_asked), "no API key was introspected");
    let mut k = McpClient::with_bearer(&public_url, key);
    k.initialize().await;
    // One client sending new tokens faster than its share gets 401 for them, not 503 for
    // everyone: 40 at once; however many seconds they straddle (three at most), at most 10 of
    // them a second are asked about.
    let http = reqwest::Client::new();
    let tries = (0..40).map(|n| {
        let (url, http) = (public_url.clone(), http.clone());
        async move { initialize_via(&http, &url, &format!("a_at_made-up-token-{n:04}")).await }
    });
    let answers = futures_util::future::join_all(tries).await;
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    assert!(answers.iter().any(|(_, body)| body.to_string().contains("more new tokens this second")), "{answers:?}");
    assert!(a.counts().await.0 - a_asked <= 30, "the client's share bounds what reaches the server");
    // The real token still works: its answer is kept.
    assert!(acme.tool_names().await.iter().any(|t| t == "demo__echo"));
    gw.kill().await;
}

#[actix_rt::test]
async fn a_caller_without_a_token_holds_no_scope_and_scopes_gate_resources_prompts_and_completions() {
    let auth = AuthServer::start();
    let tenants = format!(
        "[[tenant]]\nid = \"acme\"\nanonymous = true\n[tenant.tools]\nallow = [\"*\"]\n\
         scopes = {{ \"demo__echo\" = \"mcp\" }}\nupstream_scopes = {{ demo = \"mcp\" }}\n\
         [[tenant.oauth]]\nissuer = \"{}\"\n",
        auth.issuer
    );
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    // No Authorization header: the anonymous tenant, holding no scope.
    let mut anonymous = McpClient::new(&public_url);
    anonymous.initialize().await;
    let refused = anonymous.call("demo__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(refused.message.contains("scope"), "{refused:?}");
    let narrow = auth.token("no-mcp", "secret-2", "other", &public_url).await;
    let broad = auth.token("gateway-test", "secret-1", "mcp other", &public_url).await;
    let mut n = McpClient::with_bearer(&public_url, &narrow);
    let mut w = McpClient::with_bearer(&public_url, &broad);
    n.initialize().await;
    w.initialize().await;
    let resources = w.request("resources/list", None).await.outcome().unwrap();
    let uri = resources["resources"][0]["uri"].as_str().unwrap().to_owned();
    let prompts = w.request("prompts/list", None).await.outcome().unwrap();
    let prompt = prompts["prompts"][0]["name"].as_str().unwrap().to_owned();
    let requests = [
        ("resources/read", json!({"uri": uri})),
        ("resources/subscribe", json!({"uri": uri})),
        ("prompts/get", json!({"name": prompt, "arguments": {"name": "x"}})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": prompt}, "argument": {"name": "name", "value": "a"}}),
        ),
    ];
    for (method, params) in &requests {
        for client in [&mut anonymous, &mut n] {
            let refused = client.request(method, Some(params.clone())).await;
            let error = refused.outcome().unwrap_err();
            assert!(error.message.contains("scope \"mcp\""), "{method}: {error:?}");
        }
        let served = w.request(method, Some(params.clone())).await;
        assert!(served.outcome().is_ok(), "{method}: {:?}", served.outcome());
    }
    gw.kill().await;
}

/// An authorization server (made here) whose key set is endless: served in chunks, without
/// a length, counting what it sent.
async fn endless_keys() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>, actix_web::dev::ServerHandle) {
    use actix_web::{web, App, HttpResponse, HttpServer};
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (base_for, sent_for) = (base.clone(), sent.clone());
    let server = HttpServer::new(move || {
        let (base, sent) = (base_for.clone(), sent_for.clone());
        App::new()
            .route(
                "/.well-known/oauth-authorization-server",
                web::get().to({
                    let base = base.clone();
                    move || {
                        let body = json!({"issuer": base, "jwks_uri": format!("{base}/jwks")});
                        async move { HttpResponse::Ok().json(body) }
                    }
                }),
            )
            .route(
                "/jwks",
                web::get().to(move || {
                    let sent = sent.clone();
                    // 100 MiB in 64 KiB chunks, made as they are read.
                    let chunks = futures_util::StreamExt::map(futures_util::stream::iter(0..1600), move |_| {
                        sent.fetch_add(64 << 10, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, actix_web::Error>(actix_web::web::Bytes::from(vec![b' '; 64 << 10]))
                    });
                    async move { HttpResponse::Ok().content_type("application/json").streaming(chunks) }
                }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    (base, sent, handle)
}

#[actix_rt::test]
async fn a_100_mib_key_set_is_refused_unread_and_unknown_key_ids_read_the_keys_once_per_cooldown() {
    let (endless, sent, handle) = endless_keys().await;
    let auth = AuthServer::start();
    let tenants = format!(
        "[[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{endless}\"\n\
         [[tenant]]\nid = \"globex\"\n[[tenant.oauth]]\nissuer = \"{}\"\nrequired_scopes = [\"mcp\"]\n",
        auth.issuer
    );
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    let base = public_url.trim_end_matches("/mcp");
    // The endless key set is given up at its bound; the gateway says why.
    let token = forged_es256(&endless, &public_url, "k1");
    let (status, _, _) = initialize(&public_url, Some(&token)).await;
    assert_eq!(status, 401);
    let ready: Value = reqwest::get(format!("{base}/readyz")).await.unwrap().json().await.unwrap();
    let said = ready["oauth"].as_array().unwrap().iter().find(|i| i["issuer"] == endless.as_str()).unwrap().clone();
    assert!(said["error"].as_str().is_some_and(|e| e.contains("more than 1048576 bytes")), "{ready}");
    assert!(sent.load(std::sync::atomic::Ordering::SeqCst) < 16 << 20, "the rest of the 100 MiB was never read");
    // A flood of tokens naming key ids the other server never published: its keys are read
    // once for them (one cooldown), not once each. (Its keys' first read, at start, is over
    // before: /readyz lists them.)
    crate::support::within(async {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            tick.tick().await;
            let ready: Value = reqwest::get(format!("{base}/readyz")).await.unwrap().json().await.unwrap();
            let issuers = ready["oauth"].as_array().cloned().unwrap_or_default();
            if issuers.iter().any(|i| i["issuer"] == auth.issuer.as_str() && i["keys"].as_u64() > Some(0)) {
                break;
            }
        }
    })
    .await;
    let (_, reads_before) = auth.counts().await;
    // (Fewer than a client's share of refusals a second, with the one above: the keys held then
    // serve the real token below in the same second.)
    let flood = (0..8).map(|n| {
        let (url, token) = (public_url.clone(), forged_es256(&auth.issuer, &public_url, &format!("kid-{n}")));
        async move { initialize(&url, Some(&token)).await.0 }
    });
    let statuses = futures_util::future::join_all(flood).await;
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    let (_, reads_after) = auth.counts().await;
    assert_eq!(reads_after - reads_before, 1, "{reads_before} → {reads_after} key set reads");
    // The keys held still serve a real token.
    let mut c = McpClient::with_bearer(&public_url, &auth.token("gateway-test", "secret-1", "mcp", &public_url).await);
    c.initialize().await;
    assert!(c.tool_names().await.iter().any(|t| t == "demo__echo"));
    gw.kill().await;
    handle.stop(true).await;
}

#[actix_rt::test]
async fn the_root_form_of_the_protected_resource_metadata_names_the_one_resource() {
    let auth = AuthServer::start();
    let tenants = format!("[[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{}\"\n", auth.issuer);
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    let base = public_url.trim_end_matches("/mcp");
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let metadata: Value = reqwest::get(format!("{base}{path}")).await.unwrap().json().await.unwrap();
        assert_eq!(metadata["resource"], public_url.as_str(), "{path}");
        assert_eq!(metadata["authorization_servers"], json!([auth.issuer]), "{path}");
    }
    let other = reqwest::get(format!("{base}/.well-known/oauth-protected-resource/other")).await.unwrap();
    assert_eq!(other.status(), 404);
    gw.kill().await;
}

#[actix_rt::test]
async fn a_reload_naming_another_jwks_uri_reads_there_at_once_and_a_refused_one_changes_nothing() {
    let auth = AuthServer::start();
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/mcp");
    let file = dir.path().join("taskgate.toml");
    // config_poll_ms = 0: only SIGHUP reloads.
    let write = |jwks_uri: &str, more: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{public_url}\"\nconfig_poll_ms = 0\n\
             [store]\nbackend = \"memory\"\n[[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
             [[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{}\"\njwks_uri = \"{jwks_uri}\"\n{more}",
            demo.http.url, auth.issuer
        );
        std::fs::write(&file, text).unwrap();
    };
    let nowhere = format!("{}/nowhere", auth.issuer);
    write(&nowhere, "");
    let mut served = ServedGateway::start(&file).await;
    let hup = |served: &ServedGateway| {
        let pid = served.pid().to_string();
        assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    };
    let (status, _, _) =
        initialize(&public_url, Some(&auth.token("gateway-test", "secret-1", "mcp", &public_url).await)).await;
    assert_eq!(status, 401, "no keys where the jwks_uri points");
    // The right jwks_uri: its keys serve at once.
    write(&format!("{}/jwks", auth.issuer), "");
    hup(&served);
    served.log_line("configuration reloaded").await;
    let (status, _, body) =
        initialize(&public_url, Some(&auth.token("gateway-test", "secret-1", "mcp", &public_url).await)).await;
    assert_eq!(status, 200, "{body}");
    // A configuration naming the wrong one again, refused (a secret it needs is not set):
    // the keys in force stay, and a new token is served with them.
    write(
        &nowhere,
        "[[tenant.jwt]]\nalgorithm = \"HS256\"\nsecret_env = \"TG_NEVER_SET_ANYWHERE\"\naudience = \"x\"\n",
    );
    hup(&served);
    served.log_line("configuration reload rejected").await;
    let (status, _, body) =
        initialize(&public_url, Some(&auth.token("gateway-test", "secret-1", "mcp", &public_url).await)).await;
    assert_eq!(status, 200, "{body}");
    served.kill().await;
}

#[actix_rt::test]
async fn an_issuer_written_unlike_its_metadata_is_named_beside_what_the_metadata_names() {
    let auth = AuthServer::start();
    let tenants = format!("[[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{}/\"\n", auth.issuer);
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    let base = public_url.trim_end_matches("/mcp");
    let said = crate::support::within(async {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            tick.tick().await;
            let ready: Value = reqwest::get(format!("{base}/readyz")).await.unwrap().json().await.unwrap();
            if let Some(error) = ready["oauth"][0]["error"].as_str() {
                break error.to_owned();
            }
        }
    })
    .await;
    assert!(
        said.contains(&format!("{:?}", auth.issuer)) && said.contains(&format!("{:?}", format!("{}/", auth.issuer))),
        "{said}"
    );
    gw.kill().await;
}

/// Search mode never shows a tool its caller cannot call: `find_tools` leaves out what the
/// caller's access token lacks the scopes for (and, without a token, what needs any scope).
#[actix_rt::test]
async fn a_search_never_shows_a_tool_the_callers_scopes_do_not_reach() {
    let auth = AuthServer::start();
    let tenants = format!(
        "[[tenant]]\nid = \"acme\"\nanonymous = true\n[tenant.tools]\nsearch = true\n\
         scopes = {{ \"demo__echo\" = \"mcp\" }}\n\
         [[tenant.oauth]]\nissuer = \"{}\"\n",
        auth.issuer
    );
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    let narrow = auth.token("no-mcp", "secret-2", "other", &public_url).await;
    let broad = auth.token("gateway-test", "secret-1", "mcp other", &public_url).await;
    let found = |token: Option<String>| {
        let url = public_url.clone();
        async move {
            let mut c = match token {
                Some(token) => McpClient::with_bearer(&url, &token),
                None => McpClient::new(&url),
            };
            c.initialize().await;
            let listed = c.request("tools/list", None).await.outcome().unwrap();
            assert_eq!(listed["tools"].as_array().unwrap().len(), 2, "search mode lists its two meta-tools");
            let found = c.call("find_tools", json!({"query": "echo back the text it is given", "limit": 20})).await;
            let found = found.unwrap()["structuredContent"]["tools"].clone();
            found.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    for (who, token) in [("anonymous", None), ("a token without mcp", Some(narrow))] {
        let names = found(token).await;
        assert!(!names.contains(&"demo__echo".to_owned()), "{who}: {names:?}");
        assert!(!names.is_empty(), "{who}: other tools are found");
    }
    let names = found(Some(broad)).await;
    assert_eq!(names.first().map(String::as_str), Some("demo__echo"), "{names:?}");
    gw.kill().await;
}

/// `initialize` with `token` through `http`: its status and body. One client for a burst:
/// building one per request loads the system's certificates each time, which under load costs
/// more than a second's budget of requests.
async fn initialize_via(http: &reqwest::Client, url: &str, token: &str) -> (u16, Value) {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    let response = request.bearer_auth(token).body(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn initialize_status(http: &reqwest::Client, url: &str, token: &str) -> u16 {
    initialize_via(http, url, token).await.0
}

#[actix_rt::test]
async fn a_token_verified_lately_still_passes_while_its_source_has_forged_ones_refused_unchecked() {
    let a = AuthServer::start();
    let tenants = format!("[[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{}\"\n", a.issuer);
    let (gw, public_url, _demo, _dir) = gateway(&tenants, &[]).await.unwrap();
    let http = reqwest::Client::new();
    let claims = json!({"iss": a.issuer, "aud": public_url, "sub": "alice", "exp": now() + 300});
    let valid = a.sign(json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}), claims);
    assert_eq!(initialize_status(&http, &public_url, &valid).await, 200, "verified, and kept");
    let forged: Vec<String> = (0..20).map(|_| forged_es256(&a.issuer, &public_url, "k1")).collect();
    // This source spends its refusals at once; then, within one second (a 429 on each side
    // proves it), the token verified lately is told apart without a signature check, and passes.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let burst = forged[..=taskgate_core::tenants::refused_tokens::PER_SOURCE as usize]
            .iter()
            .map(|t| initialize_status(&http, &public_url, t));
        let statuses = futures_util::future::join_all(burst).await;
        let before = initialize_status(&http, &public_url, &forged[19]).await;
        let passes = initialize_status(&http, &public_url, &valid).await;
        let after = initialize_status(&http, &public_url, &forged[18]).await;
        seen.push((statuses.iter().filter(|s| **s == 401).count(), before, passes, after));
        if (before, after) == (429, 429) {
            assert_eq!(passes, 200, "{seen:?}");
            gw.kill().await;
            return;
        }
    }
    panic!("no second held a refused-unchecked state on both sides: {seen:?}");
}
