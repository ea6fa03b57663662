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
 * and, for a completed task, its line and its time on the device, for its queue's service time ('');
 * for an ending, then, the budgets its tokens count against (see budgetScope), its org and its key ('').
 * Returns {0, status} when refused (status '' when the task is unknown).
 *
 * Versions order the states of one task for the writer (see TaskRecordWriter): attempt a of a task is
 * assigned at 4a+1, streaming at 4a+2, requeued or resumed at 4a+3; an ending is final at ENDED_VERSION. Field
 * names (taskStateCodec) and the terminal statuses (task-statuses.ts) come by template.
 *
 * Every Redis call counts against the one Redis core the fleet shares (docs/benchmarks.md), so a
 * transition reads the fields it needs in one HMGET, writes its changes in one HSET, and a creation
 * records the state it has just written instead of reading it back: 5 calls to create, 7 to claim,
 * 6 for the first output, 9 to end (there were 52 for the four).
 */
export const TASK_TRANSITIONS_LUA = `
local op, now, guard, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[7]
local t = KEYS[1]
local n = tonumber(ARGV[6])
local fields, set = {}, {}
for i = 8, 7 + 2 * n, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  set[ARGV[i]] = ARGV[i + 1]
end
local event = {}
for i = 8 + 2 * n, #ARGV do event[#event + 1] = ARGV[i] end
-- What any transition reads of the task, in one call (false where a field is absent).
local cur = redis.call('HMGET', t, '${F.status}', '${F.attempts}', '${F.id}', '${F.address}', '${F.deviceId}',
  '${F.dispatcherId}', '${F.token}', '${F.firstTokenAt}', '${F.assignedAt}', '${F.line}', '${F.resumes}',
  '${F.budgets}', '${F.orgId}', '${F.apiKeyId}')
local st, id, addr, dev, disp, tok, ft, as, line = cur[1], cur[3], cur[4], cur[5], cur[6], cur[7], cur[8], cur[9], cur[10]
local att = tonumber(cur[2])
local resumes = tonumber(cur[11]) or 0

local function terminal(s)
  return ${ENDED_STATUSES.map((s) => `s == '${s}'`).join(' or ')}
end
local function refuse()
  return {0, st or ''}
end
-- Sets the transition's own pairs and the caller's fields in one HSET; returns the pairs it set.
local function write(own)
  local written = {unpack(own)}
  for i = 1, #fields do written[#written + 1] = fields[i] end
  redis.call('HSET', t, unpack(written))
  return written
end
local function record()
  redis.call('XADD', KEYS[2], '*', unpack(redis.call('HGETALL', t)))
  if #event > 0 then
    redis.call('XADD', KEYS[4], '*', unpack(event))
    redis.call('EXPIRE', KEYS[4], ARGV[5])
  end
end
-- A requeue or an ending lets go of the task's dispatcher: leaves its held set, KEYS[5]; or, when
-- KEYS[5] is not that set, changes nothing and returns the answer that names the holder.
local function letGo()
  if disp and disp ~= holder then return {2, disp} end
  if disp then redis.call('SREM', KEYS[5], id) end
  return nil
end

if op == 'create' then
  if st then return refuse() end
  local state = write({'${F.status}', 'queued', '${F.version}', 0, '${F.attempts}', 0, '${F.queuedAt}', now})
  redis.call('ZADD', KEYS[3], set['${F.deadline}'], set['${F.id}'])
  redis.call('PEXPIRE', t, ARGV[4])
  -- The whole state is what was just written: recorded without reading it back.
  redis.call('XADD', KEYS[2], '*', unpack(state))
  return {1, 0, '', '', '', ''}
end

if not st or terminal(st) then return refuse() end

if op == 'claim' then
  if st ~= 'queued' then return refuse() end
  -- A claim names the resumes its job knows of: a job that missed one (its resumer died before it
  -- wrote the answer so far into the job) would have its device start the answer again.
  if guard ~= '' and tonumber(guard) ~= resumes then return {0, 'resumed'} end
  att = att + 1
  -- What an earlier attempt left and this claim does not set again (a resumed task keeps the time of
  -- its first output: the client had it then).
  local stale = {}
  if resumes > 0 then ft = false end
  for _, f in ipairs({{'${F.firstTokenAt}', ft}, {'${F.token}', tok}, {'${F.dispatcherId}', disp}, {'${F.deviceId}', dev}}) do
    if f[2] and not set[f[1]] then stale[#stale + 1] = f[1] end
  end
  if #stale > 0 then redis.call('HDEL', t, unpack(stale)) end
  write({'${F.status}', 'assigned', '${F.attempts}', att, '${F.version}', 4 * att + 1, '${F.assignedAt}', now})
  dev = set['${F.deviceId}'] or false
  if set['${F.dispatcherId}'] then redis.call('SADD', KEYS[5], id) end
  record()
  -- The client learns of the assignment as event 0 of the attempt (the dispatcher numbers the rest).
  redis.call('XADD', KEYS[4], '*', 'a', att, 's', 0, 'e',
    '[{"type":"assigned","device_id":"' .. (dev or '') .. '","attempt":' .. att .. '}]')
  redis.call('EXPIRE', KEYS[4], ARGV[5])
  return {1, att, dev or '', addr or '', '', ''}
end

if op == 'first' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  if ft then
    redis.call('HSET', t, '${F.status}', 'streaming', '${F.version}', 4 * att + 2)
  else
    -- When the output came, if the caller held it before writing it (a client that does not stream).
    local at = set['${F.firstTokenAt}'] or now
    redis.call('HSET', t, '${F.status}', 'streaming', '${F.firstTokenAt}', at, '${F.version}', 4 * att + 2)
  end
  record()
  return {1, att, '', '', '', ''}
end

if op == 'requeue' then
  if st ~= 'assigned' or att ~= tonumber(guard) then return refuse() end
  local other = letGo()
  if other then return other end
  redis.call('HDEL', t, '${F.deviceId}', '${F.modelDigest}', '${F.dispatcherId}', '${F.token}', '${F.assignedAt}')
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 4 * att + 3)
  record()
  return {1, att, dev or '', addr or '', '', ''}
end

-- The device was lost after output reached the client: the task waits for a device to continue it.
if op == 'resume' then
  if (st ~= 'assigned' and st ~= 'streaming') or att ~= tonumber(guard) then return refuse() end
  local other = letGo()
  if other then return other end
  redis.call('HDEL', t, '${F.deviceId}', '${F.modelDigest}', '${F.dispatcherId}', '${F.token}', '${F.assignedAt}')
  redis.call('HSET', t, '${F.status}', 'queued', '${F.version}', 4 * att + 3, '${F.resumes}', resumes + 1)
  record()
  return {1, att, dev or '', addr or '', '', ''}
end

if op == 'end' then
  if guard == 'queued' and st ~= 'queued' then return refuse() end
  if string.sub(guard, 1, 8) == 'attempt:' and att ~= tonumber(string.sub(guard, 9)) then return refuse() end
  local other = letGo()
  if other then return other end
  if ft and set['${F.firstTokenAt}'] then
    -- An ending that carries its output's first time keeps the task's own (an earlier attempt's, resumed).
    for i = #fields - 1, 1, -2 do
      if fields[i] == '${F.firstTokenAt}' then table.remove(fields, i + 1); table.remove(fields, i) end
    end
  end
  write({'${F.finishedAt}', now, '${F.version}', ${ENDED_VERSION}})
  redis.call('ZREM', KEYS[3], id)
  -- A completed task's time on its device, for its queue's service time (the caller's to record).
  local svcLine, ms = '', ''
  if as and (set['${F.status}'] or st) == 'completed' then
    svcLine, ms = line or '', tonumber(now) - tonumber(as)
  end
  redis.call('PEXPIRE', t, ARGV[4])
  record()
  -- The budgets its tokens count against, with its org and key: the caller adds the tokens (keys of
  -- the org's and the key's, not the task's).
  return {1, att, dev or '', addr or '', svcLine, ms, cur[12] or '', cur[13] or '', cur[14] or ''}
end

return redis.error_reply('unknown task transition ' .. op)
`;
