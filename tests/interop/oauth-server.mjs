// A real OAuth 2.1 / OpenID authorization server for the tests: oidc-provider (OpenID certified),
// on a free loopback port, issuing JWT access tokens (RFC 9068) with the client_credentials
// grant for the resource a client names (RFC 8707).
//
//   node oauth-server.mjs KEYS_FILE
//
// Prints `issuer <url>` once it serves. Clients: `gateway-test` / `secret-1` (scopes mcp and
// other), `no-mcp` / `secret-2` (scope other only), `opaque-client` / `secret-4` (opaque
// tokens, checked by introspection, RFC 7662), `gateway-introspector` / `secret-3` (the
// gateway's own client, to introspect). The private signing keys are written to
// KEYS_FILE (JSON: the JWKs, newest first), so a test can also sign tokens of its own with the
// server's keys (an expired one, one for another audience). `POST /rotate` makes a new key the
// signing key and keeps the old one published, as a rotation does.

import http from 'node:http';
import fs from 'node:fs';
import Provider from 'oidc-provider';
import * as jose from 'jose';

const keysFile = process.argv[2];
let keys = [];
let provider;
let issuer;

async function newKey(n) {
  const { privateKey } = await jose.generateKeyPair('ES256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: `k${n}`, alg: 'ES256', use: 'sig' };
}

function build() {
  const p = new Provider(issuer, {
    clients: [
      { client_id: 'gateway-test', client_secret: 'secret-1', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], scope: 'mcp other', id_token_signed_response_alg: 'ES256' },
      { client_id: 'no-mcp', client_secret: 'secret-2', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], scope: 'other', id_token_signed_response_alg: 'ES256' },
      { client_id: 'opaque-client', client_secret: 'secret-4', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], scope: 'mcp other', id_token_signed_response_alg: 'ES256' },
      { client_id: 'gateway-introspector', client_secret: 'secret-3', grant_types: ['client_credentials'], redirect_uris: [], response_types: [], scope: 'other', id_token_signed_response_alg: 'ES256' },
    ],
    jwks: { keys },
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
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
  });
  return p;
}

const server = http.createServer((req, res) => {
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
  fs.writeFileSync(keysFile, JSON.stringify(keys));
  provider = build();
  console.log(`issuer ${issuer}`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
