//! The HTTP client under the upstream channels: hyper's pooled client, used directly.
//!
//! reqwest, which this replaced on the request path, wraps hyper's client in redirect and retry
//! layers and parses the request's URL twice more per request (the redirect policy, the
//! response's URL): 32k of the 125k instructions a bare actix-web + reqwest proxy spends on a
//! call (BENCHMARKS.md, "Where a proxied call's time goes"). An upstream reached through a proxy named by the
//! environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`) still goes through
//! reqwest, which speaks to proxies; the choice is made once per upstream, from its URL. The
//! connections hyper's client sends on are kept by each thread that sends ([`PerThread`],
//! `pool.rs`), so that a call stays on one thread.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use reqwest::header::{HeaderMap, HeaderValue, HOST};
use reqwest::{Method, StatusCode};

use crate::pool::{Lease, PerThread, PoolError};

/// A client for one upstream's URL.
#[derive(Clone)]
pub(crate) enum HttpClient {
    /// hyper's HTTP/1 connections straight, kept per thread: no layers, no URL parsed per
    /// request.
    Direct(PerThread),
    /// reqwest, for an upstream the environment sends through a proxy.
    Proxied(reqwest::Client),
}

/// Where a request goes: the URL parsed once, in each client's form.
pub(crate) struct Target {
    pub url: reqwest::Url,
    /// The whole URL, which connections are opened to.
    uri: hyper::Uri,
    /// Its path and query (origin form), which an HTTP/1 request names (RFC 9112 section 3.2.1).
    origin: hyper::Uri,
    /// Its host, and its port unless the scheme's default: the request's `Host`.
    host: HeaderValue,
}

impl Target {
    /// `None` if `text` is not an absolute http(s) URL.
    pub(crate) fn parse(text: &str) -> Option<Target> {
        let url = reqwest::Url::parse(text).ok()?;
        if !matches!(url.scheme(), "http" | "https") {
            return None;
        }
        // The URL as normalized (an international host in punycode) is what hyper takes.
        let uri = hyper::Uri::try_from(url.as_str()).ok()?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let origin = hyper::Uri::try_from(path).ok()?;
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str()?),
            None => url.host_str()?.to_owned(),
        };
        Some(Target { url, uri, origin, host: HeaderValue::try_from(host).ok()? })
    }
}

impl HttpClient {
    /// A client for requests to `url`, keeping at most `max_idle` idle connections for
    /// `idle_timeout`; through reqwest if the environment names a proxy for `url`.
    pub(crate) fn new(url: Option<&str>, max_idle: usize, idle_timeout: Duration) -> HttpClient {
        let proxies = hyper_util::client::proxy::matcher::Matcher::from_env();
        HttpClient::with_proxies(url, max_idle, idle_timeout, &proxies)
    }

    fn with_proxies(
        url: Option<&str>,
        max_idle: usize,
        idle_timeout: Duration,
        proxies: &hyper_util::client::proxy::matcher::Matcher,
    ) -> HttpClient {
        let proxied = url.and_then(Target::parse).is_some_and(|t| proxies.intercept(&t.uri).is_some());
        if proxied {
            return HttpClient::Proxied(
                reqwest::Client::builder()
                    .pool_idle_timeout(idle_timeout)
                    .pool_max_idle_per_host(max_idle)
                    .tcp_nodelay(true)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .expect("an HTTP client with default TLS builds"),
            );
        }
        HttpClient::Direct(PerThread::new(max_idle, idle_timeout))
    }

    /// Sends a request and returns its response once its head has arrived (the body is read
    /// from the [`Reply`]).
    pub(crate) async fn send(
        &self,
        method: Method,
        target: &Target,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Reply, HttpError> {
        match self {
            HttpClient::Direct(pool) => {
                let mut request = hyper::Request::new(Full::new(body));
                *request.method_mut() = method;
                *request.uri_mut() = target.origin.clone();
                *request.headers_mut() = headers;
                request.headers_mut().entry(HOST).or_insert_with(|| target.host.clone());
                let (response, lease) = pool.send(&target.uri, request).await.map_err(|e| match &e {
                    PoolError::Connect(_) => {
                        HttpError(format!("cannot connect: {}", HttpError::from_chain(e.as_error())))
                    }
                    PoolError::Send(_) => HttpError::from_chain(e.as_error()),
                })?;
                Ok(Reply::Direct { response, _lease: lease })
            }
            HttpClient::Proxied(client) => {
                let request = client.request(method, target.url.clone()).headers(headers);
                let request = if body.is_empty() { request } else { request.body(body) };
                let response = request.send().await.map_err(|e| HttpError::from_chain(&e))?;
                Ok(Reply::Proxied(response))
            }
        }
    }
}

/// A response whose body is read as it comes.
pub(crate) enum Reply {
    /// The connection goes back to its thread's idle ones when this is dropped (body and all).
    Direct {
        response: hyper::Response<hyper::body::Incoming>,
        _lease: Lease,
    },
    Proxied(reqwest::Response),
}

impl Reply {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Reply::Direct { response: r, .. } => r.status(),
            Reply::Proxied(r) => r.status(),
        }
    }

    pub(crate) fn headers(&self) -> &HeaderMap {
        match self {
            Reply::Direct { response: r, .. } => r.headers(),
            Reply::Proxied(r) => r.headers(),
        }
    }

    /// The body's next piece; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        match self {
            Reply::Direct { response: r, .. } => loop {
                match r.body_mut().frame().await {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(HttpError::from_chain(&e)),
                    // Trailers carry nothing MCP reads.
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) if data.is_empty() => continue,
                        Ok(data) => return Ok(Some(data)),
                        Err(_) => continue,
                    },
                }
            },
            Reply::Proxied(r) => r.chunk().await.map_err(|e| HttpError::from_chain(&e)),
        }
    }

    /// The whole body as text (invalid UTF-8 replaced), at most `limit` bytes of it.
    pub(crate) async fn text(mut self, limit: usize) -> Result<String, HttpError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            let room = limit.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= limit {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// A failed exchange, said with its causes: the clients' own messages omit them ("client
/// error (Connect)", "error sending request").
#[derive(Debug)]
pub(crate) struct HttpError(pub String);

impl HttpError {
    fn from_chain(e: &(dyn std::error::Error + 'static)) -> HttpError {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            let next = s.to_string();
            // hyper's layers often repeat their cause's text (native-tls's puts it first,
            // before the certificate's verify result).
            if !text.contains(&next) {
                text.push_str(": ");
                text.push_str(&next);
            }
            source = s.source();
        }
        HttpError(text)
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn an_error_chain_names_each_cause_once() {
        let openssl = Layer("error:0A000086:certificate verify failed", None);
        let tls = Layer(
            "error:0A000086:certificate verify failed (unable to get local issuer certificate)",
            Some(Box::new(openssl)),
        );
        let connect = Layer("client error (Connect)", Some(Box::new(tls)));
        assert_eq!(
            HttpError::from_chain(&connect).to_string(),
            "client error (Connect): error:0A000086:certificate verify failed (unable to get local issuer certificate)"
        );
    }

    fn proxies(http: &str, no: &str) -> hyper_util::client::proxy::matcher::Matcher {
        hyper_util::client::proxy::matcher::Matcher::builder().http(http).https(http).no(no).build()
    }

    #[test]
    fn an_upstream_the_environment_proxies_goes_through_reqwest_and_others_straight() {
        let idle = Duration::from_secs(1);
        let through = proxies("http://127.0.0.1:3128", "");
        let client = HttpClient::with_proxies(Some("http://mcp.internal:8080/mcp"), 4, idle, &through);
        assert!(matches!(client, HttpClient::Proxied(_)));
        let client = HttpClient::with_proxies(Some("https://mcp.example.com/mcp"), 4, idle, &through);
        assert!(matches!(client, HttpClient::Proxied(_)));
        // NO_PROXY names it, or there is no proxy at all: straight.
        let except = proxies("http://127.0.0.1:3128", "mcp.internal");
        let client = HttpClient::with_proxies(Some("http://mcp.internal:8080/mcp"), 4, idle, &except);
        assert!(matches!(client, HttpClient::Direct(_)));
        let none = proxies("", "");
        let client = HttpClient::with_proxies(Some("https://mcp.example.com/mcp"), 4, idle, &none);
        assert!(matches!(client, HttpClient::Direct(_)));
    }

    #[test]
    fn targets_are_absolute_http_urls_normalized_once() {
        let t = Target::parse("http://Example.COM:80/mcp?x=1").expect("a URL");
        assert_eq!(t.uri.to_string(), "http://example.com/mcp?x=1");
        let t = Target::parse("https://bücher.example/mcp").expect("an international host");
        assert_eq!(t.uri.host(), Some("xn--bcher-kva.example"));
        assert!(Target::parse("not a url").is_none());
        assert!(Target::parse("ftp://example.com/mcp").is_none());
    }
}
