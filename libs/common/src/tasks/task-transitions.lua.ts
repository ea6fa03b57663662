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
 * KEYS[4] task event stream (may be unused)   KEYS[5] the held set of the dispatcher ARGV[7] names
 * ARGV[1] op   ARGV[2] now (epoch ms)   ARGV[3] guard   ARGV[4] hash TTL (ms)   ARGV[5] event stream TTL (s)
 * ARGV[6] n = number of field/value pairs to set   ARGV[7] the dispatcher whose held set is KEYS[5]
 * ('' for none), then the pairs, then the event's fields (if any).
 *
 * The script touches only the keys it is passed (Redis Cluster routes it by them). A claim adds the
 * task to the held set of the claiming dispatcher, which the caller names; a requeue or an ending
 * removes it from the held set of the dispatcher holding it, which the caller guesses (its own, or the
 * one it read): when the guess is wrong the script changes nothing and returns {2, holder}, and the
 * caller runs it again with the holder's set.
 *
 * Returns {1, attempts, device, address, line, service ms} when accepted: the device the task was
 * claimed by or let go from, and its address ('' when no device was concerned), so that the caller
 * sets or clears the task held in that device's live state (a key of the device's, not the task's);
 * and, for a completed task, its line and its time on the device, for its queue's service time ('').
 * Returns {0, status} when refused (status '' when the task is unknown).
 *
 * Versions order the states of one task for the writer (see TaskRecordWriter): attempt a of a task is
 * assigned at 4a+1, streaming at 4a+2, requeued at 4a+3; an ending is final at ENDED_VERSION. Field
 * names (taskStateCodec) and the terminal statuses (task-statuses.ts) come by template.
 */
export const TASK_TRANSITIONS_LUA = `
local op, now, guard, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[7]
local t = KEYS[1]
local st = redis.call('HGET', t, '${F.status}')
local n = tonumber(ARGV[6])
local fields = {}
for i = 8, 7 + 2 * n do fields[#fields + 1] = ARGV[i] end
local event = {}
for i = 8 + 2 * n, #ARGV do event[#event + 1] = ARGV[i] end

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
-- The task joins (s) or leaves the held set of its dispatcher, KEYS[5]; the device it concerns, and
-- its address, for the caller's update of the device's live state.
local function held(s)
  local f = redis.call('HMGET', t, '${F.id}', '${F.deviceId}', '${F.address}')
  if redis.call('HGET', t, '${F.dispatcherId}') then
    if s then redis.call('SADD', KEYS[5], f[1]) else redis.call('SREM', KEYS[5], f[1]) end
  end
  return f[2] or '', f[3] or ''
end
-- A requeue or an ending lets go of the task's dispatcher: false when KEYS[5] is not its held set.
local function holderKnown()
  local d = redis.call('HGET', t, '${F.dispatcherId}')
  return not d or d == holder
end

if op == 'create' then
  if st then return refuse() end
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 0, '${F.attempts}', 0, '${F.queuedAt}', now)
  redis.call('ZADD', KEYS[3], redis.call('HGET', t, '${F.deadline}'), redis.call('HGET', t, '${F.id}'))
  redis.call('PEXPIRE', t, ARGV[4])
  record()
  return {1, 0, '', '', '', ''}
end

if not st or terminal(st) then return refuse() end
local att = tonumber(redis.call('HGET', t, '${F.attempts}'))

if op == 'claim' then
  if st ~= 'queued' then return refuse() end
  att = att + 1
  redis.call('HDEL', t, '${F.firstTokenAt}', '${F.token}', '${F.dispatcherId}', '${F.deviceId}')
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.status}', 'assigned', '${F.attempts}', att, '${F.version}', 4 * att + 1, '${F.assignedAt}', now)
  local dev, addr = held(true)
  record()
  -- The client learns of the assignment as event 0 of the attempt (the dispatcher numbers the rest).
  redis.call('XADD', KEYS[4], '*', 'a', att, 's', 0, 'e',
    '[{"type":"assigned","device_id":"' .. redis.call('HGET', t, '${F.deviceId}') .. '","attempt":' .. att .. '}]')
  redis.call('EXPIRE', KEYS[4], ARGV[5])
  return {1, att, dev, addr, '', ''}
end

if op == 'first' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  redis.call('HSET', t, '${F.status}', 'streaming', '${F.firstTokenAt}', now, '${F.version}', 4 * att + 2)
  record()
  return {1, att, '', '', '', ''}
end

if op == 'requeue' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  if not holderKnown() then return {2, redis.call('HGET', t, '${F.dispatcherId}')} end
  local dev, addr = held(false)
  redis.call('HDEL', t, '${F.deviceId}', '${F.dispatcherId}', '${F.token}', '${F.assignedAt}')
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 4 * att + 3)
  record()
  return {1, att, dev, addr, '', ''}
end

if op == 'end' then
  if guard == 'queued' and st ~= 'queued' then return refuse() end
  if string.sub(guard, 1, 8) == 'attempt:' and att ~= tonumber(string.sub(guard, 9)) then return refuse() end
  if not holderKnown() then return {2, redis.call('HGET', t, '${F.dispatcherId}')} end
  local dev, addr = held(false)
  if n > 0 then redis.call('HSET', t, unpack(fields)) end
  redis.call('HSET', t, '${F.finishedAt}', now, '${F.version}', ${ENDED_VERSION})
  redis.call('ZREM', KEYS[3], redis.call('HGET', t, '${F.id}'))
  -- A completed task's time on its device, for its queue's service time (the caller's to record).
  local line, ms = '', ''
  local as = redis.call('HGET', t, '${F.assignedAt}')
  if as and redis.call('HGET', t, '${F.status}') == 'completed' then
    line, ms = redis.call('HGET', t, '${F.line}') or '', tonumber(now) - tonumber(as)
  end
  redis.call('PEXPIRE', t, ARGV[4])
  record()
  return {1, att, dev, addr, line, ms}
end

return redis.error_reply('unknown task transition ' .. op)
`;
