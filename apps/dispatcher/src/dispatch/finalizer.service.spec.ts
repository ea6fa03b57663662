import type { Redis } from 'ioredis';
import { DISCONNECTED_MID_ANSWER, PROTOCOL_VERSION, encodeVector } from '@app/common';
import type { AppConfig, EmbedParams, JobData, Logger, TransitionResult } from '@app/common';
import { DeviceSession } from '../devices/device-session';
import type { DeviceSocket } from '../devices/device-session';
import type { UsageAudit } from '../devices/usage-audit.service';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import type { TaskJob, JobSource } from '../queues/job-source.service';
import type { Resumer } from '../queues/resumer.service';
import { EmbedCollector } from '../relay/embed-collector';
import { OutputTracker } from '../relay/output-tracker';
import type { Closing, TaskWriter } from '../relay/task-writer';
import type { TaskWriters } from '../relay/task-writers.service';
import { Assignment } from './assignment';
import { AssignmentBook } from './assignment-book';
import { Finalizer } from './finalizer.service';
import type { Outcome } from './finalizer.service';

// Hand-written in-memory collaborators: each implements the part of the real one the Finalizer uses
// (Pick<> of the real class, so a changed signature fails to compile here), and records what it was asked.

/** BullMQ job moves. `fail` makes the next moves throw (Redis gone, lock lost). */
class MemoryJobs implements Pick<JobSource, 'finish' | 'putBack'> {
  readonly moves: { move: 'finish' | 'putBack'; jobId: string; token: string; failed?: string | null }[] = [];
  fail: Error | null = null;
  finish(job: TaskJob, token: string, failed: string | null): Promise<void> {
    this.moves.push({ move: 'finish', jobId: job.id!, token, failed });
    return this.fail ? Promise.reject(this.fail) : Promise.resolve();
  }
  putBack(job: TaskJob, token: string): Promise<void> {
    this.moves.push({ move: 'putBack', jobId: job.id!, token });
    return this.fail ? Promise.reject(this.fail) : Promise.resolve();
  }
}

/** Resume: whether a task may be resumed (as set), and the jobs it continued. */
class MemoryResumer implements Pick<Resumer, 'allows' | 'continueJob' | 'deviceElsewhere'> {
  allowed = false;
  /** Whether another device can take a failed embedding batch, and the devices it was asked to look past. */
  elsewhere = false;
  readonly lookedPast: (string | null)[] = [];
  deviceElsewhere(_job: TaskJob, _needs: readonly string[], lost: string | null): Promise<boolean> {
    this.lookedPast.push(lost);
    return Promise.resolve(this.elsewhere);
  }
  readonly continued: [string, string, string][] = [];
  allows(): Promise<boolean> {
    return Promise.resolve(this.allowed);
  }
  continueJob(job: TaskJob, token: string, cause: string): Promise<boolean> {
    this.continued.push([job.id!, token, cause]);
    return Promise.resolve(true);
  }
}

/** Closings in progress, as TaskWriters tracks them for shutdown. */
class MemoryWriters implements Pick<TaskWriters, 'track'> {
  readonly tracked: Promise<unknown>[] = [];
  track<T>(closing: Promise<T>): Promise<T> {
    this.tracked.push(closing);
    return closing;
  }
}

/** The task's writer: its close is the row's transition and the client's event, in one step. */
class MemoryTaskWriter implements Pick<TaskWriter, 'close'> {
  readonly closings: Closing[] = [];
  constructor(private readonly result: TransitionResult | null | Error) {}
  close(closing: Closing): Promise<TransitionResult | null> {
    this.closings.push(closing);
    return this.result instanceof Error ? Promise.reject(this.result) : Promise.resolve(this.result);
  }
}

/** The one Redis command the Finalizer sends itself: the announcement of a job put back. */
class MemoryPublisher implements Pick<Redis, 'publish'> {
  readonly published: [string, string][] = [];
  publish(channel: string | Buffer, message: string | Buffer): Promise<number> {
    this.published.push([String(channel), String(message)]);
    return Promise.resolve(1);
  }
}

class MemoryLogger {
  readonly lines: { level: string; obj: unknown; msg: string }[] = [];
  warn = (obj: unknown, msg: string) => void this.lines.push({ level: 'warn', obj, msg });
  info = (obj: unknown, msg: string) => void this.lines.push({ level: 'info', obj, msg });
  error = (obj: unknown, msg: string) => void this.lines.push({ level: 'error', obj, msg });
  debug = () => undefined;
  at(level: string) {
    return this.lines.filter((l) => l.level === level);
  }
}

/** A socket.io socket as far as a session uses it: who it is, and what it was sent. */
function fakeSocket() {
  const sent: [string, unknown][] = [];
  const socket = {
    data: { deviceId: 'device-1', orgId: null, protocol: PROTOCOL_VERSION },
    connected: true,
    emit: (event: string, payload: unknown) => void sent.push([event, payload]),
  };
  return { socket: socket as unknown as DeviceSocket, sent };
}

const job = {
  id: 'job-1',
  queueName: 'chat:m:network',
  data: { taskId: 'task-1', taskAddress: 'network:task-1', requestId: 'req-1' },
} as unknown as TaskJob;

const accepted = (attempt: number): TransitionResult => ({ ok: true, attempt });

/** An embedding batch's job; `updateData` keeps what it was given, as BullMQ's does. */
function embedJob(embed: EmbedParams): TaskJob {
  const j = {
    id: 'job-1',
    queueName: 'chat:e:network',
    data: {
      kind: 'embed',
      taskId: 'task-1',
      taskAddress: 'network:task-1',
      requires: ['embeddings'],
      embed,
    } as JobData,
    updateData(data: JobData) {
      j.data = data;
      return Promise.resolve();
    },
  };
  return j as unknown as TaskJob;
}

function setup(
  opts: {
    attempt?: number;
    result?: TransitionResult | null | Error;
    maxAttempts?: number;
    resumable?: boolean;
    job?: TaskJob;
    /** An embedding batch of these params (its job, tracker and collector). */
    embed?: EmbedParams;
  } = {},
) {
  const book = new AssignmentBook();
  const freed: DeviceSession[] = [];
  book.whenFree((s) => freed.push(s));
  const writers = new MemoryWriters();
  const jobs = new MemoryJobs();
  const metrics = new DispatcherMetrics();
  /** What the finalizer reported of each completed task's usage to the device's audit. */
  const audited: unknown[][] = [];
  const audit = { completed: (...args: unknown[]) => audited.push(args) } as unknown as UsageAudit;
  const redis = new MemoryPublisher();
  const resumer = new MemoryResumer();
  resumer.allowed = opts.resumable ?? false;
  const logger = new MemoryLogger();
  const config = { MAX_ATTEMPTS: opts.maxAttempts ?? 3, TASK_IDLE_TIMEOUT_MS: 1_000 } as AppConfig;
  const finalizer = new Finalizer(
    book,
    writers as unknown as TaskWriters,
    jobs as unknown as JobSource,
    metrics,
    audit,
    resumer as unknown as Resumer,
    redis as unknown as Redis,
    config,
    logger as unknown as Logger,
  );
  const { socket, sent } = fakeSocket();
  const session = new DeviceSession(socket);
  const tracker = opts.embed
    ? OutputTracker.forEmbedding(opts.embed)
    : new OutputTracker(100, 1_000, { tokens: 1_000, bytes: 1_000_000 });
  const collector = opts.embed ? new EmbedCollector(opts.embed) : null;
  const a = new Assignment(
    session,
    opts.job ?? (opts.embed ? embedJob(opts.embed) : job),
    'lock-token',
    tracker,
    collector,
  );
  book.add(a);
  const writer = new MemoryTaskWriter(opts.result === undefined ? accepted(opts.attempt ?? 1) : opts.result);
  // The claim: accepted with an attempt, or refused (attempt 0, no writer).
  a.settle(opts.attempt === 0 ? null : { attempt: opts.attempt ?? 1, writer: writer as unknown as TaskWriter });

  const counted = async (name: 'tasks' | 'assignments') =>
    (await metrics[name].get()).values.map((v) => ({ labels: v.labels, value: v.value }));
  return {
    finalizer,
    a,
    book,
    freed,
    writers,
    jobs,
    writer,
    redis,
    logger,
    sent,
    tracker,
    metrics,
    counted,
    audited,
    resumer,
  };
}

const completed: Outcome = {
  kind: 'completed',
  finishReasons: ['stop'],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};

describe('Finalizer: resume', () => {
  it('a device lost after output, when the task may be resumed: the resume transition, then the job continued, not finished', async () => {
    const t = setup({ resumable: true });
    t.tracker.output([{ index: 0, content: 'Hel' }]);
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.writer.closings).toEqual([{ kind: 'resume', event: { type: 'resumed', reason: 'device_disconnected' } }]);
    expect(t.resumer.continued).toEqual([['job-1', 'lock-token', 'device_disconnected']]);
    expect(t.jobs.moves).toEqual([]);
    expect(await t.counted('tasks')).toEqual([]);
  });

  it('a resume the task refuses (it ended meanwhile, e.g. its client left): the job is finished, not continued', async () => {
    const t = setup({ resumable: true, result: { ok: false, status: 'cancelled' } });
    t.tracker.output([{ index: 0, content: 'Hel' }]);
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.resumer.continued).toEqual([]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'resume' }]);
  });

  it('a runtime failure after output is resumed; the same failure before output, or a refusal to resume, ends the task', async () => {
    const failure: Outcome = {
      kind: 'failed',
      code: 'device_error',
      message: 'upstream 500',
      stop: false,
      resumable: true,
    };
    const after = setup({ resumable: true });
    after.tracker.output([{ index: 0, content: 'Hel' }]);
    await after.finalizer.end(after.a, failure);
    expect(after.writer.closings[0]).toEqual({ kind: 'resume', event: { type: 'resumed', reason: 'device_error' } });

    const before = setup({ resumable: true });
    await before.finalizer.end(before.a, failure);
    expect(before.writer.closings[0]).toMatchObject({
      kind: 'end',
      ending: { status: 'failed', errorCode: 'device_error' },
    });

    const refused = setup({ resumable: false });
    refused.tracker.output([{ index: 0, content: 'Hel' }]);
    await refused.finalizer.end(refused.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(refused.writer.closings[0]).toMatchObject({
      kind: 'end',
      ending: { status: 'failed', errorCode: 'device_disconnected' },
    });
    expect(refused.resumer.continued).toEqual([]);
  });

  it('a silent device dropped after output, when the task cannot be resumed: timed_out with device_timeout, the device told to stop', async () => {
    const t = setup({ resumable: false });
    t.tracker.output([{ index: 0, content: 'Hel' }]);
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_timeout', stop: true });
    expect(t.sent).toEqual([['task:cancel', { task_address: 'network:task-1' }]]);
    expect(t.writer.closings[0]).toMatchObject({
      kind: 'end',
      ending: { status: 'timed_out', errorCode: 'device_timeout' },
      event: { type: 'error', code: 'device_timeout' },
    });
  });

  it('output another device cannot continue (a tool call) is not resumed', async () => {
    const t = setup({ resumable: true });
    const call = { id: 'c1', type: 'function' as const, function: { name: 'f', arguments: '{}' } };
    t.tracker.output([{ index: 0, tool_calls: [call] }]);
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.writer.closings[0]).toMatchObject({ kind: 'end', ending: { errorCode: 'device_disconnected' } });
  });

  it("a resumed task's completion records the whole answer: usage, bytes, and each device's segment", async () => {
    const earlier = {
      attempt: 1,
      device_id: 'device-0',
      assigned_at: null,
      first_output_at: null,
      last_output_at: null,
      tokens: 2,
      bytes: 3,
      sha256: 'x',
      ended: 'device_disconnected',
    };
    const continuedJob = {
      ...job,
      data: { ...job.data, resume: true, continued: { text: 'Hel', tokens: 2, resumes: 1, segments: [earlier] } },
    } as unknown as TaskJob;
    const t = setup({ attempt: 2, job: continuedJob });
    t.tracker.output([{ index: 0, content: 'lo' }]);
    await t.finalizer.end(t.a, {
      kind: 'completed',
      finishReasons: ['stop'],
      // The device read the answer so far (2 tokens) as part of its prompt.
      usage: { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 },
    });
    const closing = t.writer.closings[0];
    expect(closing).toMatchObject({
      kind: 'end',
      ending: { promptTokens: 5, completionTokens: 3, outputBytes: 5 },
      event: { type: 'done', usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } },
    });
    const segments = JSON.parse((closing.kind === 'end' && closing.ending.segments) || '[]') as unknown[];
    expect(segments).toEqual([
      earlier,
      expect.objectContaining({ attempt: 2, device_id: 'device-1', tokens: 1, bytes: 2, ended: 'completed' }),
    ]);
  });
});

describe('Finalizer: embedding batches', () => {
  const embed: EmbedParams = { input: ['alpha', 'beta'] };

  it('completed: the vectors, in input order, go out whole with the done event; the record has the hash and no completion', async () => {
    const t = setup({ embed });
    t.a.collector!.add([{ index: 1, embedding: encodeVector([0, 1]) }]);
    t.a.collector!.add([{ index: 0, embedding: encodeVector([1, 0]) }]);
    await t.finalizer.end(t.a, {
      kind: 'completed',
      finishReasons: [],
      usage: { prompt_tokens: 4, completion_tokens: 0, total_tokens: 4 },
    });
    const [closing] = t.writer.closings;
    expect(closing).toMatchObject({
      kind: 'end',
      ending: { status: 'completed', promptTokens: 4, completionTokens: 0, outputBytes: 16, usageSource: 'device' },
      output: [{ type: 'embedding', data: [{ index: 0 }, { index: 1 }] }],
      event: { type: 'done', finish_reasons: [], usage: { prompt_tokens: 4, completion_tokens: 0, total_tokens: 4 } },
    });
    expect(closing.kind === 'end' && closing.ending.outputSha256).toBe(t.a.collector!.sha256());
    expect(t.audited).toEqual([]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: null }]);
  });

  it('a device that claims more prompt tokens than the inputs can hold is clamped', async () => {
    const t = setup({ embed: { input: [[1, 2, 3]] } });
    t.a.collector!.add([{ index: 0, embedding: encodeVector([1]) }]);
    await t.finalizer.end(t.a, {
      kind: 'completed',
      finishReasons: [],
      usage: { prompt_tokens: 1_000, completion_tokens: 5, total_tokens: 1_005 },
    });
    expect(t.writer.closings[0]).toMatchObject({
      event: { usage: { prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 } },
    });
  });

  it('a runtime failure or invalid vectors: the batch goes back to its line for another device, and this one is avoided', async () => {
    for (const failure of [
      { kind: 'failed', code: 'upstream_error', message: 'boom', stop: false, resumable: true },
      { kind: 'failed', code: 'device_protocol_error', message: 'bad vectors', stop: true },
    ] as Outcome[]) {
      const t = setup({ embed });
      t.resumer.elsewhere = true;
      await t.finalizer.end(t.a, failure);
      expect(t.writer.closings).toEqual([
        { kind: 'requeue', event: { type: 'requeued', reason: (failure as { code: string }).code } },
      ]);
      expect(t.resumer.lookedPast).toEqual(['device-1']);
      expect(t.a.job.data.avoid).toEqual(['device-1']);
      expect(t.jobs.moves).toEqual([{ move: 'putBack', jobId: 'job-1', token: 'lock-token' }]);
    }
  });

  it('a failed batch with no other device, or on its last attempt, or failing as any device would, ends with its error', async () => {
    const runtime: Outcome = { kind: 'failed', code: 'upstream_error', message: 'boom', stop: false, resumable: true };
    const alone = setup({ embed });
    await alone.finalizer.end(alone.a, runtime);
    const last = setup({ embed, attempt: 3, maxAttempts: 3 });
    last.resumer.elsewhere = true;
    await last.finalizer.end(last.a, runtime);
    const input = setup({ embed });
    input.resumer.elsewhere = true;
    await input.finalizer.end(input.a, {
      kind: 'failed',
      code: 'context_length_exceeded',
      message: 'too long',
      stop: false,
    });
    for (const t of [alone, last, input]) {
      expect(t.writer.closings[0]).toMatchObject({ kind: 'end', ending: { status: 'failed' } });
      expect(t.a.job.data.avoid).toBeUndefined();
      expect(t.jobs.moves[0]).toMatchObject({ move: 'finish' });
    }
  });
});

describe('Finalizer', () => {
  it('completed: frees the device once, writes the ending with its done event, completes the job, counts it', async () => {
    const t = setup();
    t.tracker.output([{ index: 0, content: 'hi' }]);
    await t.finalizer.end(t.a, completed);

    expect(t.freed).toEqual([t.a.session]);
    expect(t.book.busy(t.a.session)).toBe(false);
    expect(t.writer.closings).toEqual([
      {
        kind: 'end',
        ending: {
          status: 'completed',
          finishReason: 'stop',
          promptTokens: 3,
          completionTokens: 2,
          outputSha256: t.tracker.sha256,
          outputBytes: 2,
          usageSource: 'device',
        },
        event: { type: 'done', finish_reasons: ['stop'], usage: completed.usage },
      },
    ]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: null }]);
    expect(await t.counted('tasks')).toEqual([{ labels: { outcome: 'completed' }, value: 1 }]);
    expect(t.sent).toEqual([]);
    expect(t.redis.published).toEqual([]);
    expect(t.writers.tracked).toHaveLength(1);
    // The device's report, unclamped, goes to its usage audit with the bytes relayed and the choices.
    expect(t.audited).toEqual([[t.a.session, 2, 2, 1]]);
  });

  it('completed with usage over what the request allows: records the clamped usage, counts and logs the clamp', async () => {
    const t = setup();
    const usage = { prompt_tokens: 5_000, completion_tokens: 2, total_tokens: 5_002 };
    await t.finalizer.end(t.a, { kind: 'completed', finishReasons: ['length'], usage });
    const closing = t.writer.closings[0];
    expect(closing.kind === 'end' && closing.ending.promptTokens).toBe(1_000);
    expect((await t.metrics.clampedUsage.get()).values[0].value).toBe(1);
    expect(t.logger.at('warn').map((l) => l.msg)).toEqual(['device usage clamped']);
  });

  it('failed with stop: tells the device to stop, writes the failure and its error event, fails the job with the code', async () => {
    const t = setup();
    await t.finalizer.end(t.a, { kind: 'failed', code: 'device_error', message: 'boom', stop: true });
    expect(t.sent).toEqual([['task:cancel', { task_address: 'network:task-1' }]]);
    expect(t.writer.closings).toEqual([
      {
        kind: 'end',
        ending: { status: 'failed', errorCode: 'device_error' },
        event: { type: 'error', code: 'device_error', message: 'boom' },
      },
    ]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'device_error' }]);
    expect(await t.counted('tasks')).toEqual([{ labels: { outcome: 'device_error' }, value: 1 }]);
    expect(t.freed).toHaveLength(1);
  });

  it('failed after output: the ending bills what was relayed', async () => {
    const t = setup();
    t.tracker.output([{ index: 0, content: 'abc' }]);
    t.tracker.output([{ index: 0, content: 'de' }]);
    await t.finalizer.end(t.a, { kind: 'failed', code: 'device_error', message: 'boom', stop: false });
    expect(t.sent).toEqual([]);
    const closing = t.writer.closings[0];
    expect(closing.kind === 'end' && closing.ending).toEqual({
      status: 'failed',
      errorCode: 'device_error',
      outputSha256: t.tracker.sha256,
      completionTokens: 2,
      outputBytes: 5,
      usageSource: 'relay',
    });
  });

  it('cancelled: tells the device to stop, ends the task with no event for the gone client, fails the job', async () => {
    const t = setup();
    await t.finalizer.end(t.a, { kind: 'cancelled' });
    expect(t.sent).toEqual([['task:cancel', { task_address: 'network:task-1' }]]);
    expect(t.writer.closings).toEqual([
      { kind: 'end', ending: { status: 'cancelled', errorCode: 'client_disconnected' } },
    ]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'cancelled' }]);
    expect(await t.counted('tasks')).toEqual([{ labels: { outcome: 'cancelled' }, value: 1 }]);
  });

  it('dropped before any output, attempts left: requeues, puts the job back, announces it, counts a requeue', async () => {
    const t = setup({ attempt: 1 });
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.writer.closings).toEqual([
      { kind: 'requeue', event: { type: 'requeued', reason: 'device_disconnected' } },
    ]);
    expect(t.jobs.moves).toEqual([{ move: 'putBack', jobId: 'job-1', token: 'lock-token' }]);
    expect(t.redis.published).toEqual([[expect.any(String), 'chat:m:network']]);
    expect(await t.counted('assignments')).toEqual([{ labels: { result: 'requeued' }, value: 1 }]);
    // A requeue is not an ending of the task.
    expect(await t.counted('tasks')).toEqual([]);
    expect(t.freed).toHaveLength(1);
    expect(t.sent).toEqual([]);
  });

  it('dropped on the last attempt: fails the task as device_disconnected', async () => {
    const t = setup({ attempt: 3, maxAttempts: 3 });
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'no_ack' });
    expect(t.writer.closings).toEqual([
      {
        kind: 'end',
        ending: { status: 'failed', errorCode: 'device_disconnected' },
        event: {
          type: 'error',
          code: 'device_disconnected',
          message: 'No device could complete the request (3 attempt(s)).',
        },
      },
    ]);
    expect(t.jobs.moves).toEqual([
      { move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'device_disconnected' },
    ]);
    expect(t.redis.published).toEqual([]);
  });

  it('dropped after output reached the client: fails it (never a requeue, never a silent stop)', async () => {
    const t = setup({ attempt: 1 });
    t.tracker.output([{ index: 0, content: 'x' }]);
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    const closing = t.writer.closings[0];
    expect(closing.kind).toBe('end');
    expect(closing.kind === 'end' && closing.event).toEqual({
      type: 'error',
      code: 'device_disconnected',
      message: DISCONNECTED_MID_ANSWER,
    });
    expect(t.jobs.moves.map((m) => m.move)).toEqual(['finish']);
  });

  it('a requeue the repository refused (the task ended elsewhere) does not put the job back', async () => {
    const t = setup({ result: { ok: false, status: 'cancelled' } });
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'requeue' }]);
    expect(t.redis.published).toEqual([]);
    expect(await t.counted('assignments')).toEqual([]);
  });

  it('abandoned: no transition of its own, the job is finished, nothing counted', async () => {
    const t = setup({ result: null });
    await t.finalizer.end(t.a, { kind: 'abandoned' });
    expect(t.writer.closings).toEqual([{ kind: 'abandon' }]);
    expect(t.jobs.moves).toEqual([{ move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'abandoned' }]);
    expect(await t.counted('tasks')).toEqual([]);
    expect(t.freed).toHaveLength(1);
  });

  it('an ending the repository refused is not counted, but the job still moves', async () => {
    const t = setup({ result: { ok: false, status: 'timed_out' } });
    await t.finalizer.end(t.a, completed);
    expect(t.jobs.moves).toHaveLength(1);
    expect(await t.counted('tasks')).toEqual([]);
  });

  it('a refused claim (no writer, attempt 0): frees the device and finishes the job, writes nothing', async () => {
    const t = setup({ attempt: 0 });
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'no_ack' });
    expect(t.writer.closings).toEqual([]);
    expect(t.jobs.moves).toEqual([
      { move: 'finish', jobId: 'job-1', token: 'lock-token', failed: 'device_disconnected' },
    ]);
    expect(t.freed).toHaveLength(1);
  });

  it('a second ending of the same assignment does nothing at all', async () => {
    const t = setup();
    await Promise.all([
      t.finalizer.end(t.a, completed),
      t.finalizer.end(t.a, { kind: 'cancelled' }),
      t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' }),
    ]);
    await t.finalizer.end(t.a, { kind: 'failed', code: 'device_error', message: 'late', stop: true });
    expect(t.freed).toHaveLength(1);
    expect(t.book.busy(t.a.session)).toBe(false);
    expect(t.writer.closings).toHaveLength(1);
    expect(t.jobs.moves).toHaveLength(1);
    expect(t.sent).toEqual([]);
    expect(t.writers.tracked).toHaveLength(1);
    expect(await t.counted('tasks')).toEqual([{ labels: { outcome: 'completed' }, value: 1 }]);
  });

  it('waits for the claim to settle before deciding (the attempt is known only then)', async () => {
    const states = setup();
    // A fresh assignment whose claim is still in flight.
    const a = new Assignment(
      states.a.session,
      job,
      'lock-token',
      new OutputTracker(100, 1_000, { tokens: 1_000, bytes: 1_000_000 }),
    );
    states.book.add(a);
    const ending = states.finalizer.end(a, { kind: 'dropped', reason: 'device_disconnected' });
    await Promise.resolve();
    expect(states.writer.closings).toEqual([]);
    // The device is freed at once, though: it may take other work while the record is written.
    expect(states.freed).toEqual([a.session]);
    a.settle({ attempt: 2, writer: states.writer as unknown as TaskWriter });
    await ending;
    expect(states.writer.closings.map((c) => c.kind)).toEqual(['requeue']);
  });

  it('a job that cannot be moved is logged once as a warning; the ending is still counted', async () => {
    const t = setup();
    t.jobs.fail = new Error('Missing lock for job job-1');
    await expect(t.finalizer.end(t.a, completed)).resolves.toBeUndefined();
    expect(t.jobs.moves).toHaveLength(1);
    expect(t.logger.at('warn')).toEqual([
      {
        level: 'warn',
        obj: { err: 'Missing lock for job job-1', task: 'network:task-1', outcome: 'completed' },
        msg: 'could not move the job',
      },
    ]);
    expect(await t.counted('tasks')).toEqual([{ labels: { outcome: 'completed' }, value: 1 }]);
  });

  it('a requeued job that cannot be put back is logged once; it is not announced or counted as requeued', async () => {
    const t = setup();
    t.jobs.fail = new Error('connection closed');
    await t.finalizer.end(t.a, { kind: 'dropped', reason: 'device_disconnected' });
    expect(t.jobs.moves.map((m) => m.move)).toEqual(['putBack']);
    expect(t.logger.at('warn').map((l) => l.msg)).toEqual(['could not move the job']);
    expect(t.redis.published).toEqual([]);
    expect(await t.counted('assignments')).toEqual([]);
    // Nor as an ending: the task is queued again, it did not end.
    expect(await t.counted('tasks')).toEqual([]);
  });
});
