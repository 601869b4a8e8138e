// A real OAuth 2.1 / OpenID authorization server for the tests: oidc-provider (OpenID certified),
// on a free loopback port, issuing JWT access tokens (RFC 9068) with the client_credentials
// grant for the resource a client names (RFC 8707).
//
//   node oauth-server.mjs KEYS_FILE [OPAQUE_PREFIX]
//
// Prints `issuer <url>` once it serves. Clients: `gateway-test` / `secret-1` (scopes mcp and
// other), `no-mcp` / `secret-2` (scope other only), `opaque-client` / `secret-4` (opaque
// tokens, checked by introspection, RFC 7662), `gateway-introspector` / `secret-3` (the
// gateway's own client, to introspect). The private signing keys are written to
// KEYS_FILE (JSON: the JWKs, newest first), so a test can also sign tokens of its own with the
// server's keys (an expired one, one for another audience). `POST /rotate` makes a new key the
// signing key and keeps the old one published, as a rotation does.
//
// Tokens are ES256, except those of `rs-client` / `secret-6` (RS256), `ps-client` / `secret-7`
// (PS256) and `ed-client` / `secret-8` (EdDSA, Ed25519); `user-two` / `secret-9` is a second
// caller like `gateway-test`. `gateway-exchanger` / `secret-5` may also use the token exchange
// grant (RFC 8693, registered below: oidc-provider has none built in): a valid access token of
// this server is exchanged for one whose audience is the `resource` asked for, for the same
// subject, with the exchanging client as its actor (`act`). `GET /exchanges` counts them by
// subject. The opaque tokens begin with OPAQUE_PREFIX when one is given (as GitHub's `gho_` do).
// `GET /counts` says how many introspection requests, key set reads and token requests it has
// answered.

import http from 'node:http';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';
import * as jose from 'jose';

const keysFile = process.argv[2];
const opaquePrefix = process.argv[3] ?? '';
const counts = { introspection: 0, jwks: 0, token: 0 };
let keys = [];
let provider;
let issuer;
// Keys of the other algorithms, after the ES256 ones (the first key is the one tests sign with).
let others = [];
const exchanges = {};
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
const algorithms = { 'rs-client': 'RS256', 'ps-client': 'PS256', 'ed-client': 'EdDSA' };

async function newKey(n) {
  const { privateKey } = await jose.generateKeyPair('ES256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: `k${n}`, alg: 'ES256', use: 'sig' };
}

async function otherKey(alg, kid) {
  const { privateKey } = await jose.generateKeyPair(alg, { extractable: true, modulusLength: 2048 });
  return { ...(await jose.exportJWK(privateKey)), kid, alg, use: 'sig' };
}

const client = (id, secret, scope, grants = ['client_credentials']) =>
  ({ client_id: id, client_secret: secret, grant_types: grants, redirect_uris: [], response_types: [], scope, id_token_signed_response_alg: 'ES256' });

// RFC 8693: the subject token (an access token of this server, still valid) exchanged for one
// for `resource`, for the same subject, the client that asked named as the actor.
async function tokenExchange(ctx) {
  const { params, client: actor } = ctx.oidc;
  if (params.subject_token_type !== ACCESS_TOKEN) {
    throw new errors.InvalidRequest('subject_token_type must be an access token');
  }
  if (!params.resource) {
    throw new errors.InvalidTarget('resource is required');
  }
  const publicKeys = keys.map(({ d, p, q, dp, dq, qi, ...pub }) => pub);
  let subject;
  try {
    ({ payload: subject } = await jose.jwtVerify(params.subject_token, jose.createLocalJWKSet({ keys: publicKeys }), { issuer, typ: 'at+jwt' }));
  } catch (e) {
    throw new errors.InvalidGrant(`subject_token is not valid: ${e.code ?? e.message}`);
  }
  const sub = subject.sub ?? subject.client_id;
  exchanges[sub] = (exchanges[sub] ?? 0) + 1;
  const now = Math.floor(Date.now() / 1000);
  const exp = Math.min(subject.exp, now + 300);
  const key = keys[0];
  const token = await new jose.SignJWT({ client_id: actor.clientId, act: { sub: actor.clientId }, scope: params.scope ?? subject.scope })
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'at+jwt' })
    .setIssuer(issuer)
    .setSubject(sub)
    .setAudience(params.resource)
    .setIssuedAt(now)
    .setExpirationTime(exp)
    .setJti(randomUUID())
    .sign(await jose.importJWK(key, key.alg));
  ctx.body = { access_token: token, issued_token_type: ACCESS_TOKEN, token_type: 'Bearer', expires_in: exp - now };
}

function build() {
  const p = new Provider(issuer, {
    clients: [
      client('gateway-test', 'secret-1', 'mcp other'),
      client('no-mcp', 'secret-2', 'other'),
      client('opaque-client', 'secret-4', 'mcp other'),
      client('gateway-introspector', 'secret-3', 'other'),
      client('gateway-exchanger', 'secret-5', 'mcp other', ['client_credentials', TOKEN_EXCHANGE]),
      client('rs-client', 'secret-6', 'mcp'),
      client('ps-client', 'secret-7', 'mcp'),
      client('ed-client', 'secret-8', 'mcp'),
      client('user-two', 'secret-9', 'mcp other'),
    ],
    jwks: { keys: [...keys, ...others] },
    scopes: ['mcp', 'other'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: client.scope,
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: client.clientId === 'opaque-client' ? 'opaque' : 'jwt',
          jwt: { sign: { alg: algorithms[client.clientId] ?? 'ES256' } },
        }),
      },
    },
  });
  // Opaque tokens are looked up by their id: a prefix on the id is a prefix on the token.
  const generate = p.ClientCredentials.prototype.generateTokenId;
  p.ClientCredentials.prototype.generateTokenId = function prefixed() {
    const id = generate.call(this);
    return this.clientId === 'opaque-client' ? `${opaquePrefix}${id}` : id;
  };
  p.registerGrantType(TOKEN_EXCHANGE, tokenExchange, ['subject_token', 'subject_token_type', 'requested_token_type', 'resource', 'audience', 'scope']);
  return p;
}

const server = http.createServer((req, res) => {
  if (req.url.startsWith('/token/introspection')) counts.introspection += 1;
  if (req.url.startsWith('/jwks')) counts.jwks += 1;
  if (req.method === 'POST' && req.url === '/token') counts.token += 1;
  if (req.method === 'GET' && req.url === '/counts') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(counts));
    return;
  }
  if (req.method === 'GET' && req.url === '/exchanges') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(exchanges));
    return;
  }
  if (req.method === 'POST' && req.url === '/rotate') {
    newKey(keys.length + 1).then((key) => {
      keys = [key, ...keys];
      fs.writeFileSync(keysFile, JSON.stringify(keys));
      provider = build();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kid: key.kid }));
    });
    return;
  }
  provider.callback()(req, res);
});

server.listen(0, '127.0.0.1', async () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  keys = [await newKey(1)];
  others = [await otherKey('RS256', 'rsa'), await otherKey('PS256', 'pss'), await otherKey('EdDSA', 'ed')];
  fs.writeFileSync(keysFile, JSON.stringify(keys));
  provider = build();
  console.log(`issuer ${issuer}`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
