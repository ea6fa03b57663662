import { parseSnapshot } from './task-state';
import { creationArgs, endRecordStatement, endingPairs, guardArg } from './task-transition-args';
import { ENDED_VERSION } from './task-transitions.lua';

const task = {
  id: 'id-1',
  address: 'network:id-1',
  orgId: 'org-1',
  apiKeyId: null,
  modelId: 'm',
  mode: 'network' as const,
  api: 'openai' as const,
  kind: 'embedding' as const,
  stream: true,
  line: 'line-1',
  apiInstance: 'api-1',
  deadline: 1_000,
};

/** Pairs as a hash, as the script's HSET leaves them. */
const hash = (pairs: (string | number)[]) =>
  Object.fromEntries(Array.from({ length: pairs.length / 2 }, (_, i) => [pairs[2 * i], String(pairs[2 * i + 1])]));

describe('task transition arguments', () => {
  it('a creation is its pair count, then pairs that parse back to the task', () => {
    const [count, ...pairs] = creationArgs(task);
    expect(count).toBe(pairs.length / 2);
    // What the script adds itself on create.
    const state = { ...hash(pairs), st: 'queued', ver: '0', att: '0', q: '500' };
    expect(parseSnapshot(state)).toEqual({
      id: 'id-1',
      address: 'network:id-1',
      orgId: 'org-1',
      apiKeyId: null,
      modelId: 'm',
      mode: 'network',
      api: 'openai',
      kind: 'embedding',
      stream: true,
      line: 'line-1',
      apiInstance: 'api-1',
      status: 'queued',
      version: 0,
      attempts: 0,
      deviceId: null,
      dispatcherId: null,
      token: null,
      modelDigest: null,
      finishReason: null,
      errorCode: null,
      promptTokens: null,
      completionTokens: null,
      outputSha256: null,
      outputBytes: null,
      usageSource: null,
      resumes: null,
      segments: null,
      traceId: null,
      queuedAt: new Date(500),
      assignedAt: null,
      firstTokenAt: null,
      finishedAt: null,
    });
  });

  it('a creation carries the budgets its tokens count against, and only when there are some', () => {
    const [, ...withBudgets] = creationArgs({ ...task, budgets: 'ok' });
    expect(hash(withBudgets).bud).toBe('ok');
    const [, ...without] = creationArgs({ ...task, budgets: null });
    expect(hash(without)).not.toHaveProperty('bud');
  });

  it("a creation carries the task's kind, chat as well as embedding", () => {
    expect(hash(creationArgs(task).slice(1)).kind).toBe('embedding');
    expect(hash(creationArgs({ ...task, kind: 'chat' }).slice(1)).kind).toBe('chat');
  });

  it('an ending sets its status and only the values it has (a missing value never erases one)', () => {
    expect(endingPairs({ status: 'cancelled', errorCode: 'client_disconnected', finishReason: null })).toEqual([
      'st',
      'cancelled',
      'err',
      'client_disconnected',
    ]);
    const full = endingPairs({
      status: 'completed',
      finishReason: 'stop',
      promptTokens: 0,
      completionTokens: 2,
      outputSha256: 'abc',
      outputBytes: 7,
      usageSource: 'device',
      firstTokenAt: 1_234,
    });
    expect(hash(full)).toEqual({
      st: 'completed',
      fr: 'stop',
      pt: '0',
      ct: '2',
      sha: 'abc',
      ob: '7',
      us: 'device',
      ft: '1234',
    });
  });

  it('an ended state parses with its counts and times', () => {
    const state = {
      ...hash(creationArgs(task).slice(1)),
      ...hash(endingPairs({ status: 'completed', promptTokens: 3, completionTokens: 0, usageSource: 'relay' })),
      ver: String(ENDED_VERSION),
      att: '2',
      q: '1',
      as: '2',
      ft: '3',
      fin: '4',
      dev: 'd',
    };
    expect(parseSnapshot(state)).toMatchObject({
      status: 'completed',
      version: ENDED_VERSION,
      attempts: 2,
      promptTokens: 3,
      completionTokens: 0,
      usageSource: 'relay',
      deviceId: 'd',
      assignedAt: new Date(2),
      firstTokenAt: new Date(3),
      finishedAt: new Date(4),
    });
  });

  it('a state without id or status (expired, never created) is no task', () => {
    expect(parseSnapshot({})).toBeNull();
    expect(parseSnapshot({ id: 'x' })).toBeNull();
  });

  it('guards: any, only queued, or only the given attempt', () => {
    expect(guardArg('any')).toBe('');
    expect(guardArg('queued')).toBe('queued');
    expect(guardArg({ attempt: 3 })).toBe('attempt:3');
  });

  it('the Postgres fallback ends only a live record, with the final version; queued means queued only', () => {
    const ending = { status: 'timed_out' as const, errorCode: 'queue_timeout' };
    const any = endRecordStatement('id-1', ending, { attempt: 2 });
    expect(any.text).toMatch(/WHERE id = \$1 AND status = ANY\(\$9::task_status\[\]\)/);
    expect(any.values).toEqual([
      'id-1',
      'timed_out',
      'queue_timeout',
      null,
      null,
      null,
      null,
      ENDED_VERSION,
      ['queued', 'assigned', 'streaming'],
      null,
      null,
    ]);
    expect(endRecordStatement('id-1', ending, 'queued').values[8]).toEqual(['queued']);
    expect(endRecordStatement('id-1', ending, 'any').values[8]).toEqual(['queued', 'assigned', 'streaming']);
  });
});
