//! The Lua scripts that make each multi-key change one atomic step at Redis.

use redis::Script;

/// KEYS: task, owner index, expiry, leases, holders, count, running (tenant), running
/// (principal). ARGV: record, owner index member, expiry or '', id, replica, lease ms,
/// max tasks, PEXPIRE ms or '', '1' when not terminal.
pub(super) const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return -2 end
local held = tonumber(redis.call('GET', KEYS[6]) or '0')
if held >= tonumber(ARGV[7]) then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
end
redis.call('ZADD', KEYS[2], 0, ARGV[2])
if ARGV[9] == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ARGV[4])
  redis.call('HSET', KEYS[5], ARGV[4], ARGV[5])
  redis.call('ZADD', KEYS[7], '+inf', ARGV[4])
  redis.call('ZADD', KEYS[8], '+inf', ARGV[4])
end
return redis.call('INCR', KEYS[6])
"#;

/// Replaces the record if it is still exactly `ARGV[1]`; a terminal one leaves the leases and
/// the caps' counts. 1 done, 0 gone, -1 changed meanwhile. KEYS: task, leases, holders,
/// running (tenant), running (principal). ARGV: old, new, '1' when terminal, id.
pub(super) const REPLACE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZREM', KEYS[5], ARGV[4])
end
return 1
"#;

/// Deletes a task from every key; returns the record, if it was still there.
/// KEYS: task, owner index, leases, holders, count, expiry, running (tenant), running (principal),
/// input requests. ARGV: id, owner index member.
pub(super) const DELETE: &str = r#"
local current = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[9])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[2], ARGV[2]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local indexed = redis.call('ZREM', KEYS[6], ARGV[1])
if current or indexed == 1 then
  local left = redis.call('DECR', KEYS[5])
  if left < 0 then redis.call('SET', KEYS[5], 0) end
end
return current
"#;

/// Takes up to ARGV[3] tasks whose lease ended: they are `ARGV[1]`'s for `ARGV[2]` ms; returns
/// their ids. KEYS: leases, holders.
pub(super) const CLAIM: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[2], id, ARGV[1])
end
return due
"#;

/// Renews this replica's leases; returns the ids it no longer holds (another replica took the
/// task, or it ended elsewhere). A lease that ended while Redis was out of reach, and that no
/// one took meanwhile, is still this replica's and is renewed. KEYS: leases, holders. ARGV:
/// replica, lease ms, then the ids.
pub(super) const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[1] and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)
  else
    table.insert(lost, id)
  end
end
return lost
"#;

/// Reserves a place for a task under its tenant's caps, before anything reaches the upstream.
/// KEYS: running (tenant), running (principal). ARGV: id, tenant cap or '', principal cap or
/// '', how long the reservation holds (ms). Returns 'ok', 'tenant' or 'principal'.
pub(super) const RESERVE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[2] ~= '' and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 'tenant' end
if ARGV[3] ~= '' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'principal' end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])
return 'ok'
"#;

/// GCRA over several buckets, all or nothing, by Redis's clock. KEYS: the buckets. ARGV: per
/// bucket its emission interval and its tolerance (ms). Returns {} when admitted, else
/// {index of the refusing bucket (1-based), ms until it admits}.
pub(super) const RATES: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local next = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tau = tonumber(ARGV[2 * i])
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  if tat - now > tau then return {i, math.max(1, math.ceil(tat - now - tau))} end
  next[i] = tat + interval
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, tostring(next[i]), 'PX', math.ceil(next[i] - now) + 1)
end
return {}
"#;

/// Applies one change to a session that still exists, and pushes its expiry back.
/// KEYS: the session. ARGV: keep ms ('0': none), 'l' | 's' | 'u' | 'b' | 'g' | 'x' | 'a', the
/// value (for 'b', the upstream's name; for 'a', the names activated, a JSON array), max
/// subscriptions (for 'a', max activations), (for 'b') the upstream session.
/// 'b' binds an upstream session only if none is bound (the first copy to bind one wins); 'x'
/// forgets the GET stream's replica only if it is still that one; 'a' adds to the activated
/// tools (field `a`, a sorted JSON array), new names in order while there is room.
/// 1 done, 0 no such session.
pub(super) const SESSION_CHANGE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] == 'l' then
  redis.call('HSET', KEYS[1], 'l', ARGV[3])
elseif ARGV[2] == 's' then
  local field = 's:' .. ARGV[3]
  local held = redis.call('HLEN', KEYS[1]) - 1 - redis.call('HEXISTS', KEYS[1], 'l') - redis.call('HEXISTS', KEYS[1], 'g')
    - redis.call('HEXISTS', KEYS[1], 'a')
  if redis.call('HEXISTS', KEYS[1], field) == 1 or held < tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], field, '')
  end
elseif ARGV[2] == 'u' then
  redis.call('HDEL', KEYS[1], 's:' .. ARGV[3])
elseif ARGV[2] == 'b' then
  redis.call('HSETNX', KEYS[1], 'b:' .. ARGV[3], ARGV[5])
elseif ARGV[2] == 'g' then
  redis.call('HSET', KEYS[1], 'g', ARGV[3])
elseif ARGV[2] == 'x' then
  if redis.call('HGET', KEYS[1], 'g') == ARGV[3] then redis.call('HDEL', KEYS[1], 'g') end
elseif ARGV[2] == 'a' then
  local held = redis.call('HGET', KEYS[1], 'a')
  local names = held and cjson.decode(held) or {}
  local known = {}
  for _, name in ipairs(names) do known[name] = true end
  for _, name in ipairs(cjson.decode(ARGV[3])) do
    if not known[name] and #names < tonumber(ARGV[4]) then
      known[name] = true
      table.insert(names, name)
    end
  end
  table.sort(names)
  if #names > 0 then redis.call('HSET', KEYS[1], 'a', cjson.encode(names)) end
end
if ARGV[1] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
"#;

/// Adds tools to a 2026-07-28 identity's activations (a set) while it holds fewer than the
/// bound, and keeps it.
/// KEYS: the set. ARGV: keep ms ('0': until deleted), the bound, the names.
pub(super) const ACTIVATE: &str = r#"
for i = 3, #ARGV do
  if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('SADD', KEYS[1], ARGV[i]) end
end
if ARGV[1] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
"#;

pub(super) struct Scripts {
    pub(super) create: Script,
    pub(super) replace: Script,
    pub(super) delete: Script,
    pub(super) claim: Script,
    pub(super) renew: Script,
    pub(super) reserve: Script,
    pub(super) rates: Script,
    pub(super) session: Script,
    pub(super) activate: Script,
}
