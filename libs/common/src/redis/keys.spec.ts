import { deviceStateCodec } from '../live/device-state-codec';
import { taskStateCodec } from '../tasks/task-state-codec';
import { REDIS_KEYS, keys, redisKeyDocs } from './keys';
import { KeySpace } from './key-space';
import { SINGLE_LAYOUT } from './layout';

describe('Redis keys', () => {
  it('names every key as deployments have them (these names are persisted: a change strands data)', () => {
    expect(Object.fromEntries(redisKeyDocs().map((d) => [d.id, d.pattern]))).toEqual({
      taskState: 'sy:t:<task id>',
      taskStream: 'sy:task:<task id>',
      records: 'sy:records',
      liveTasks: 'sy:live',
      heldBy: 'sy:held:<dispatcher id>',
      streamWake: 'sy:wake:<reader id>',
      serviceTime: 'sy:svc:<queue>',
      presence: 'sy:presence:<pool>:<model id>',
      presenceChannel: 'sy:presence-changed',
      deviceState: 'sy:dev:<device id>',
      deviceCoolingOff: 'sy:cool:{<token key>}',
      deviceStrikeOuts: 'sy:cool:{<token key>}:n',
      deviceHandshakeFailures: 'sy:rl:devfail:<address>',
      instance: 'sy:inst:<api|dispatcher>:<instance id>',
      instances: 'sy:insts:<api|dispatcher>',
      takeoverLock: 'sy:takeover:<dispatcher id>',
      readinessProbe: 'sy:ready',
      queuePrefix: 'sy:<line>:<BullMQ key>',
      lineWait: 'sy:<line>:wait',
      lineActive: 'sy:<line>:active',
      lineJob: 'sy:<line>:<task id>',
      lineJobLock: 'sy:<line>:<task id>:lock',
      fairPasses: 'sy:fair:<queue>',
      fairState: 'sy:fairs:<queue>',
      backlog: 'sy:backlog',
      stalledSweep: 'sy:stalled-sweep',
      jobsChannel: 'sy:jobs',
      cancelChannel: 'sy:cancel',
      requestsPerMinute: 'sy:rl:rpm:<org id>',
      concurrencySlots: 'sy:limit:concurrency:<org id>',
      queuedSlots: 'sy:limit:queued:<org id>:<model id>',
      orgTokensSpent: 'sy:spent:{<org id>}:<month (YYYY-MM)>',
      keyTokensSpent: 'sy:spent:{<org id>}:key:<key id>:<month (YYYY-MM)>',
      apiKeyFailures: 'sy:rl:authfail:<address>',
      adminTokenFailures: 'sy:rl:adminfail:<address>',
      adminSession: 'sy:admin-session:<SHA-256 of the session id>',
    });
  });

  it('builds names from their parts; on a single server the placed keys have the same names, and BullMQ the prefix `sy`', () => {
    const single = KeySpace.for(SINGLE_LAYOUT);
    expect(single.taskState('t-1')).toBe('sy:t:t-1');
    expect(single.records(0)).toBe('sy:records');
    expect(single.heldBy('d-1', 0)).toBe('sy:held:d-1');
    expect(single.instance('dispatcher', 'd-1')).toBe('sy:inst:dispatcher:d-1');
    expect(keys.queuedSlots('o-1', 'llama3.2:3b')).toBe('sy:limit:queued:o-1:llama3.2:3b');
    expect(single.lineJob('chat.network.m.o-1', 't-1')).toBe('sy:chat.network.m.o-1:t-1');
    expect(single.queuePrefix('chat.network.m')).toBe('sy');
    expect(keys.requestsPerMinute).toBe('sy:rl:rpm');
    expect(single.partitions).toEqual([0]);
  });

  it('writes each placed key with its hash tag for the cluster, and a key used alone as it is', () => {
    const docs = new Map(redisKeyDocs().map((d) => [d.id, d]));
    expect(docs.get('taskState')?.clusterPattern).toBe("sy:{<task's tag>}:t:<task id>");
    expect(docs.get('records')?.clusterPattern).toBe('sy:{<partition tag>}:records');
    expect(docs.get('lineWait')?.clusterPattern).toBe("sy:{<queue's tag>}:<line>:wait");
    expect(docs.get('jobsChannel')?.clusterPattern).toBe('sy:{<partition tag>}:jobs');
    expect(docs.get('takeoverLock')?.clusterPattern).toBe('sy:takeover:<dispatcher id>');
  });

  it('gives the docs a type, what it holds and a lifetime for every entry; one part per parameter', () => {
    for (const [id, entry] of Object.entries(REDIS_KEYS)) {
      const parts = 'parts' in entry ? entry.parts.length : 0;
      if (typeof entry.name === 'function') {
        expect([id, entry.name.length]).toEqual([id, parts]);
      } else {
        expect([id, 'prefix' in entry || parts === 0]).toEqual([id, true]);
      }
    }
    for (const doc of redisKeyDocs()) {
      expect(doc.holds.length).toBeGreaterThan(0);
      expect(doc.lifetime.length).toBeGreaterThan(0);
      expect(doc.pattern).not.toMatch(/undefined/);
    }
    const patterns = redisKeyDocs().map((d) => d.pattern);
    expect(new Set(patterns).size).toBe(patterns.length);
  });

  it("lists a hash's fields from its codec", () => {
    const docs = new Map(redisKeyDocs().map((d) => [d.id, d]));
    expect(docs.get('taskState')?.fields).toEqual(taskStateCodec.describe());
    expect(docs.get('deviceState')?.fields).toEqual(deviceStateCodec.describe());
    expect(docs.get('records')?.fields).toBeUndefined();
  });

  it('reads the parts of a scanned key back', () => {
    const single = KeySpace.for(SINGLE_LAYOUT);
    const lines = single.lineActiveScan();
    expect(lines.match).toBe('sy:chat.*:active');
    expect(lines.lineOf(single.lineActive('chat.network.m%3A1.o-1'))).toBe('chat.network.m%3A1.o-1');
    const presence = single.presenceScan();
    expect(presence.match).toBe('sy:presence:*:*');
    expect(presence.placeOf(single.presence('network', 'llama3.2:3b'))).toEqual({
      pool: 'network',
      model: 'llama3.2:3b',
    });
  });
});
