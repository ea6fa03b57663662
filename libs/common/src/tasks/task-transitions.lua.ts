import { DEVICE_FIELDS } from '../live/device-state-codec';
import { keys, luaKey } from '../redis/keys';
import { TASK_FIELDS as F } from './task-state-codec';
import { ENDED_STATUSES } from './task-statuses';

/** The version of an ended task: higher than any state of any attempt. */
export const ENDED_VERSION = 1_000_000_000;

/**
 * Every transition of a task, atomically in Redis: the task's state hash is the authority while the
 * task is in flight (Postgres is written behind, from the records stream). Each accepted transition
 * bumps the state's version, appends the whole new state to the records stream, and may append one
 * event to the task's event stream in the same step, so that a client sees an ending if and only if
 * the task ended that way.
 *
 * KEYS[1] task state hash   KEYS[2] records stream   KEYS[3] live set (tasks by deadline)
 * KEYS[4] task event stream (may be unused)
 * ARGV[1] op   ARGV[2] now (epoch ms)   ARGV[3] guard   ARGV[4] hash TTL (ms)   ARGV[5] event stream TTL (s)
 * ARGV[6] n = number of field/value pairs to set, then the pairs, then the event's fields (if any).
 *
 * Returns {1, attempts} when accepted, {0, status} when refused (status '' when the task is unknown).
 *
 * Claims and endings also set the task held by the device in its live state (keys.deviceState), only
 * while that state exists: its dispatcher writes the rest and renews it. Key names, field names
 * (taskStateCodec, deviceStateCodec) and the terminal statuses (task-statuses.ts) come by template.
 *
 * Versions order the states of one task for the writer (see TaskRecordWriter): attempt a of a task is
 * assigned at 4a+1, streaming at 4a+2, requeued at 4a+3; an ending is final at ENDED_VERSION.
 */
export const TASK_TRANSITIONS_LUA = `
local op, now, guard = ARGV[1], ARGV[2], ARGV[3]
local t = KEYS[1]
local st = redis.call('HGET', t, '${F.status}')
local n = tonumber(ARGV[6])
local fields = {}
for i = 7, 6 + 2 * n do fields[#fields + 1] = ARGV[i] end
local event = {}
for i = 7 + 2 * n, #ARGV do event[#event + 1] = ARGV[i] end

local function terminal(s)
  return ${ENDED_STATUSES.map((s) => `s == '${s}'`).join(' or ')}
end
local function refuse()
  return {0, st or ''}
end
local function record()
  redis.call('XADD', KEYS[2], '*', unpack(redis.call('HGETALL', t)))
  if #event > 0 then
    redis.call('XADD', KEYS[4], '*', unpack(event))
    redis.call('EXPIRE', KEYS[4], ARGV[5])
  end
end
local function held(s)
  local f = redis.call('HMGET', t, '${F.id}', '${F.dispatcherId}', '${F.deviceId}', '${F.address}')
  local id, d, dev, addr = f[1], f[2], f[3], f[4]
  if d then
    local hk = ${luaKey(keys.heldBy, 'd')}
    if s then redis.call('SADD', hk, id) else redis.call('SREM', hk, id) end
  end
  -- The operators' view of the device (its live state, while its dispatcher keeps it): the task it holds.
  if dev then
    local dk = ${luaKey(keys.deviceState, 'dev')}
    if s then
      if redis.call('EXISTS', dk) == 1 then redis.call('HSET', dk, '${DEVICE_FIELDS.task}', addr) end
    elseif redis.call('HGET', dk, '${DEVICE_FIELDS.task}') == addr then
      redis.call('HSET', dk, '${DEVICE_FIELDS.task}', '')
    end
  end
end

if op == 'create' then
  if st then return refuse() end
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 0, '${F.attempts}', 0, '${F.queuedAt}', now)
  redis.call('ZADD', KEYS[3], redis.call('HGET', t, '${F.deadline}'), redis.call('HGET', t, '${F.id}'))
  redis.call('PEXPIRE', t, ARGV[4])
  record()
  return {1, 0}
end

if not st or terminal(st) then return refuse() end
local att = tonumber(redis.call('HGET', t, '${F.attempts}'))

if op == 'claim' then
  if st ~= 'queued' then return refuse() end
  att = att + 1
  redis.call('HDEL', t, '${F.firstTokenAt}', '${F.token}', '${F.dispatcherId}', '${F.deviceId}')
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.status}', 'assigned', '${F.attempts}', att, '${F.version}', 4 * att + 1, '${F.assignedAt}', now)
  held(true)
  record()
  -- The client learns of the assignment as event 0 of the attempt (the dispatcher numbers the rest).
  redis.call('XADD', KEYS[4], '*', 'a', att, 's', 0, 'e',
    '[{"type":"assigned","device_id":"' .. redis.call('HGET', t, '${F.deviceId}') .. '","attempt":' .. att .. '}]')
  redis.call('EXPIRE', KEYS[4], ARGV[5])
  return {1, att}
end

if op == 'first' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  redis.call('HSET', t, '${F.status}', 'streaming', '${F.firstTokenAt}', now, '${F.version}', 4 * att + 2)
  record()
  return {1, att}
end

if op == 'requeue' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  held(false)
  redis.call('HDEL', t, '${F.deviceId}', '${F.dispatcherId}', '${F.token}', '${F.assignedAt}')
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 4 * att + 3)
  record()
  return {1, att}
end

if op == 'end' then
  if guard == 'queued' and st ~= 'queued' then return refuse() end
  if string.sub(guard, 1, 8) == 'attempt:' and att ~= tonumber(string.sub(guard, 9)) then return refuse() end
  held(false)
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.finishedAt}', now, '${F.version}', ${ENDED_VERSION})
  redis.call('ZREM', KEYS[3], redis.call('HGET', t, '${F.id}'))
  -- A completed task's time on its device feeds its queue's service time (an exponential moving
  -- average), from which a waiting request's eta_ms is estimated.
  local as = redis.call('HGET', t, '${F.assignedAt}')
  if as and redis.call('HGET', t, '${F.status}') == 'completed' then
    local q = string.match(redis.call('HGET', t, '${F.line}') or '', '^(.*)%.[^.]+$')
    if q then
      local svc = ${luaKey(keys.serviceTime, 'q')}
      local x = tonumber(now) - tonumber(as)
      local old = tonumber(redis.call('HGET', svc, 'ms') or '')
      redis.call('HSET', svc, 'ms', old and math.floor(old * 0.8 + x * 0.2) or x)
      redis.call('PEXPIRE', svc, 3600000)
    end
  end
  redis.call('PEXPIRE', t, ARGV[4])
  record()
  return {1, att}
end

return redis.error_reply('unknown task transition ' .. op)
`;
