import { request as httpRequest } from 'node:http';
import { createRedis, KeySpace } from '@app/common';
import { REDIS_URL, closeDb, createDevice, createTenant, db, http, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  FakeDevice,
  LiveStream,
  TERMINAL,
  assertOpenAIError,
  bearer,
  chatBody,
  eventually,
  sha256,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitAllTerminal,
  waitStatus,
  waitOnline,
  waitTasks,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/** Every sim device of this suite writes replies of this many tokens, so any of them gives the same answer. */
const TOKENS = 16;

/**
 * Chaos at the edges: devices killed, frozen (SIGSTOP) or disconnecting before and after their first
 * token, and clients leaving at every stage. Each case checks that the request ends with a whole
 * answer or an explicit error, that no output arrives twice (the content equals the sim's
 * deterministic reply, or is a prefix of it when the request failed), that every task row ends,
 * and that the system serves normally afterwards.
 */
describe('chaos: devices and clients', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const devices: Proc[] = [];
  const fakes: FakeDevice[] = [];
  const url = () => `${api.url}/v1/chat/completions`;

  /** The device each case starts with (its own model), started together to save time. */
  const victims: Record<string, { model: string; id: string; token: string; proc: Proc }> = {};

  beforeAll(async () => {
    // A frozen device is dropped after DEVICE_INACTIVITY_MS: short here, to keep the cases short.
    [api, dispatcher] = await Promise.all([
      startApi({ QUEUE_TIMEOUT_MS: '30000' }),
      startDispatcher({ DEVICE_INACTIVITY_MS: '6000', LOG_LEVEL: 'info' }),
    ]);
    tenant = await createTenant();
    const specs: [string, { ttftMs?: number; tokensPerSecond?: number }][] = [
      ['killBefore', { ttftMs: 10_000 }],
      ['killAfter', { tokensPerSecond: 4 }],
      ['stopBefore', { ttftMs: 4_000 }],
      ['stopAfter', { tokensPerSecond: 4 }],
      // Slow enough to abort before assignment (behind another task), before the first token, or mid-answer.
      ['clients', { ttftMs: 2_500, tokensPerSecond: 10 }],
    ];
    await Promise.all(
      specs.map(async ([name, opts]) => {
        const model = await newModel();
        victims[name] = { model, ...(await device(model, opts)) };
      }),
    );
  });

  afterAll(async () => {
    for (const f of fakes) {
      f.close();
    }
    for (const d of devices) {
      d.child.kill('SIGCONT');
    }
    await stopAll(devices, [api, dispatcher].filter(Boolean));
    await closeDb();
  });

  /** The dispatcher's log lines about a task, for failure messages. */
  const logOf = (address: string) =>
    dispatcher.proc.output
      .split('\n')
      .filter((l) => l.includes(address))
      .join('\n');

  /** What the api logged at warn and above (pino levels 40-60), for failure messages. */
  const apiTrouble = () =>
    api.proc.output
      .split('\n')
      .filter((l) => /"level":[456]0/.test(l))
      .join('\n');

  /** Waits until the device acknowledged the assignment (the dispatcher logs it). */
  const accepted = (address: string) =>
    dispatcher.proc.waitFor(new RegExp(`"task":"${address}".*"task assigned"`), 15_000);

  /** How many connections of the Redis server listen to the cancels (PUBSUB NUMSUB), for failure messages. */
  async function cancelListeners(): Promise<string> {
    const redis = createRedis(REDIS_URL);
    try {
      const counts = await redis.pubsub('NUMSUB', ...KeySpace.of(redis).allChannels('cancel'));
      return `subscribers to the cancel channel: ${JSON.stringify(counts)}`;
    } finally {
      redis.disconnect();
    }
  }

  /** A model of its own for one case, enabled for the tenant. */
  async function newModel(): Promise<string> {
    const model = uniq('chaos');
    await db().model.create({ data: { id: model, network: true } });
    await db().orgModel.create({ data: { orgId: tenant.org.id, modelId: model } });
    return model;
  }

  async function device(model: string, opts: { ttftMs?: number; tokensPerSecond?: number } = {}) {
    const { id, token } = await createDevice();
    const proc = await startDevice(dispatcher.url, token, { models: [model], tokens: TOKENS, ...opts });
    devices.push(proc);
    return { id, token, proc };
  }

  const chat = (model: string, content: string, extra: Record<string, unknown> = {}) =>
    http('POST', url(), { headers: bearer(tenant.key), body: chatBody(model, content, extra) });

  /** The deterministic reply for a prompt, from a healthy device (also proves the system serves). */
  async function reference(model: string, prompt: string): Promise<string> {
    const res = await chat(model, prompt);
    expect({ status: res.status, message: `the system does not serve normally: ${res.text}` }).toEqual(
      expect.objectContaining({ status: 200 }),
    );
    expect(res.body.choices[0].finish_reason).toBe('stop');
    return res.body.choices[0].message.content;
  }

  /** A whole streamed answer: one role chunk, the reference content once, one finish, [DONE]. */
  function assertWholeStream(live: LiveStream, expected: string): void {
    expectStatus(live, 200);
    const events = live.events;
    expect({ actual: events.at(-1), message: live.text.slice(-300) }).toEqual(
      expect.objectContaining({ actual: '[DONE]' }),
    );
    expect({ ok: !events.some((e) => e !== '[DONE]' && e.error), message: live.text.slice(-300) }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const roles = events.filter((e) => e !== '[DONE]' && e.choices?.some((c: any) => c.delta?.role));
    // the role chunk came once
    expect(roles).toHaveLength(1);
    // the content, exactly once
    expect(sseContent(events)).toBe(expected);
    const finishes = events.filter((e) => e !== '[DONE]' && e.choices?.some((c: any) => c.finish_reason));
    expect(finishes).toHaveLength(1);
  }

  /** A stream that failed after output: an error event last, no [DONE], what arrived is a prefix of the answer. */
  function assertFailedStream(live: LiveStream, expected: string, code: string): string {
    expectStatus(live, 200);
    const events = live.events;
    const last = events.at(-1);
    expect({ code: last?.error?.code, message: live.text.slice(-400) }).toEqual(expect.objectContaining({ code }));
    expect(last.error.type).toBe('server_error');
    expect(events).not.toContain('[DONE]');
    expect(events.some((e) => e !== '[DONE]' && e.choices?.some((c: any) => c.finish_reason === 'stop'))).toBe(false);
    const content = sseContent(events);
    // output had reached the client
    expect(content.length).toBeGreaterThan(0);
    expect({
      ok: expected.startsWith(content),
      message: `not a prefix of the answer:\n${content}\n${expected}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    return content;
  }

  describe('devices', () => {
    it('SIGKILL before the first token (streamed): the task moves to another device; the answer comes whole, once', async () => {
      const victim = victims.killBefore;
      const model = victim.model;
      const prompt = 'killed before it spoke';
      const live = new LiveStream(url(), tenant.key, chatBody(model, prompt, { stream: true }));
      const assigned = await waitStatus(tenant.org.id, 'assigned', 15_000, { modelId: model });
      expect(assigned.deviceId).toBe(victim.id);
      victim.proc.child.kill('SIGKILL');
      const backup = await device(model, { tokensPerSecond: 40 });
      await live.done;
      const expected = await reference(model, prompt);
      assertWholeStream(live, expected);
      const row = await waitTasks({ address: assigned.address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('completed');
      expect(row[0].deviceId).toBe(backup.id);
      expect(row[0].attempts).toBe(2);
      expect(row[0].outputSha256).toBe(sha256(expected));
    });

    it('SIGKILL after the first token (non-streamed): 502 device_disconnected, the row fails with the hash of what was relayed', async () => {
      const victim = victims.killAfter;
      const model = victim.model;
      const pending = chat(model, 'killed mid-answer');
      const streaming = await waitStatus(tenant.org.id, 'streaming', 15_000, { modelId: model });
      victim.proc.child.kill('SIGKILL');
      const res = await pending;
      assertOpenAIError(res, 502, 'device_disconnected');
      const row = await waitTasks({ address: streaming.address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('failed');
      expect(row[0].errorCode).toBe('device_disconnected');
      expect(row[0].outputSha256 ?? '').toMatch(/^[0-9a-f]{64}$/);
      await device(model);
      await reference(model, 'afterwards');
    });

    it('SIGSTOP before the first token (non-streamed): dropped after DEVICE_INACTIVITY_MS, the task moves on', async () => {
      const victim = victims.stopBefore;
      const model = victim.model;
      const prompt = 'frozen before it spoke';
      const pending = chat(model, prompt);
      const assigned = await waitStatus(tenant.org.id, 'assigned', 15_000, { modelId: model });
      expect(assigned.deviceId).toBe(victim.id);
      // Frozen once it has accepted (the row is claimed before the device acknowledges).
      await accepted(assigned.address);
      victim.proc.child.kill('SIGSTOP');
      const backup = await device(model, { tokensPerSecond: 40 });
      const res = await pending;
      expectStatus(res, 200);
      victim.proc.child.kill('SIGCONT');
      const expected = await reference(model, prompt);
      expect(res.body.choices[0].message.content).toBe(expected);
      const row = await waitTasks({ address: assigned.address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('completed');
      expect(row[0].deviceId).toBe(backup.id);
      expect({ attempts: row[0].attempts, message: `dispatcher log:\n${logOf(assigned.address)}` }).toEqual(
        expect.objectContaining({ attempts: 2 }),
      );
    });

    it('SIGSTOP after the first token (streamed): an explicit device_disconnected error, nothing after it', async () => {
      const victim = victims.stopAfter;
      const model = victim.model;
      const prompt = 'frozen mid-answer';
      const live = new LiveStream(url(), tenant.key, chatBody(model, prompt, { stream: true }));
      await live.waitFor(/"content":"[^"]+"/);
      victim.proc.child.kill('SIGSTOP');
      await live.done;
      const text = live.text;
      victim.proc.child.kill('SIGCONT');
      // The thawed device reconnects, serves again, and sends nothing more for the old task.
      await waitOnline([model], victim.token, { proc: victim.proc });
      const expected = await reference(model, prompt);
      const content = assertFailedStream(live, expected, 'device_disconnected');
      const address = live.events[0].task_address;
      const row = await waitTasks({ address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('failed');
      expect(row[0].errorCode).toBe('device_disconnected');
      // the row hashes exactly what the client got
      expect(row[0].outputSha256).toBe(sha256(content));
      expect(live.text).toBe(text);
    });

    it('a device disconnecting before its first token: requeued, served whole by another', async () => {
      const model = await newModel();
      const { id, token } = await createDevice();
      const fake = await FakeDevice.connect(dispatcher.url, token, [model]);
      fakes.push(fake);
      const prompt = 'the first device leaves';
      const live = new LiveStream(url(), tenant.key, chatBody(model, prompt, { stream: true }));
      const assignment = await fake.nextAssignment();
      fake.close();
      await device(model, { tokensPerSecond: 40 });
      await live.done;
      const expected = await reference(model, prompt);
      assertWholeStream(live, expected);
      const row = await waitTasks({ address: assignment.task_address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('completed');
      expect(row[0].deviceId).not.toBe(id);
    });

    it('a device disconnecting after its first token: the client gets what was sent, then device_disconnected', async () => {
      const model = await newModel();
      const { token } = await createDevice();
      const fake = await FakeDevice.connect(dispatcher.url, token, [model]);
      fakes.push(fake);
      const live = new LiveStream(url(), tenant.key, chatBody(model, 'the device leaves mid-answer', { stream: true }));
      const assignment = await fake.nextAssignment();
      fake.socket.emit('task:delta', {
        task_address: assignment.task_address,
        seq: 0,
        choices: [{ index: 0, content: 'partial' }],
      });
      await live.waitFor(/"content":"partial"/);
      fake.close();
      await live.done;
      const content = assertFailedStream(live, 'partial answer', 'device_disconnected');
      expect(content).toBe('partial');
      const row = await waitTasks({ address: assignment.task_address }, (r) => TERMINAL.includes(r[0]?.status));
      expect(row[0].status).toBe('failed');
      expect(row[0].outputSha256).toBe(sha256('partial'));
    });
  });

  describe('clients', () => {
    let model: string;
    let slow: { model: string; id: string; proc: Proc };

    beforeAll(() => {
      slow = victims.clients;
      model = slow.model;
    });

    /**
     * Only this model's tasks queued since `since`: a case's own. A task of an earlier case may still
     * show a status it left in its row, whose last records are written behind.
     */
    const queuedSince = (since: Date) => ({ modelId: model, queuedAt: { gte: since } });

    /** A request the test can abort; non-streamed ones are read whole, streamed ones progressively. */
    function request(prompt: string, stream: boolean) {
      if (stream) {
        const live = new LiveStream(url(), tenant.key, chatBody(model, prompt, { stream: true }));
        return { abort: () => live.abort(), done: live.done.then(() => live), live };
      }
      // node:http, whose abort closes the connection at once (fetch's may linger for seconds before
      // the response has started), as a client that hangs up does.
      const req = httpRequest(url(), {
        method: 'POST',
        headers: { ...bearer(tenant.key), 'content-type': 'application/json' },
      });
      const done = new Promise<unknown>((resolve) => {
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode));
          res.on('error', resolve);
        });
        req.on('error', resolve);
      });
      req.end(JSON.stringify(chatBody(model, prompt)));
      return { abort: () => req.destroy(), done, live: null };
    }

    async function assertCancelled(address: string, reachedDevice: boolean) {
      // The dispatcher ends a cancelled row in two writes (status, then error code and finished_at).
      const row = (await waitTasks({ address }, (r) => TERMINAL.includes(r[0]?.status) && r[0].finishedAt !== null))[0];
      if (row.status !== 'cancelled') {
        // What tells a lost cancel from one the dispatcher ignored: who listens, and what it logged.
        expect({
          status: row.status,
          message: `${row.status} ${row.errorCode}; ${await cancelListeners()}; the dispatcher:\n${logOf(address)}\nthe api's warnings:\n${apiTrouble()}`,
        }).toEqual(expect.objectContaining({ status: 'cancelled' }));
      }
      expect(row.errorCode).toBe('client_disconnected');
      expect(row.finishedAt).toBeTruthy();
      if (reachedDevice) {
        expect(row.deviceId).toBe(slow.id);
        await slow.proc.waitFor(new RegExp(`"task_address":"${address}".*"outcome":"cancelled"`));
      } else {
        expect(row.deviceId).toBeNull();
        expect(row.attempts).toBe(0);
        expect(slow.proc.output).not.toMatch(new RegExp(address));
      }
      return row;
    }

    for (const stream of [false, true]) {
      const kind = stream ? 'streamed' : 'non-streamed';

      it(`${kind}: abort before assignment: the job leaves the queue, no device sees it`, async () => {
        const blockerPrompt = `blocker ${kind}`;
        let since = new Date(Date.now() - 1);
        const blocker = chat(model, blockerPrompt);
        await waitStatus(tenant.org.id, 'assigned', 15_000, queuedSince(since));
        since = new Date(Date.now() - 1);
        const target = request(`queued ${kind}`, stream);
        const queued = await waitStatus(tenant.org.id, 'queued', 15_000, queuedSince(since));
        target.abort();
        await target.done;
        await assertCancelled(queued.address, false);
        const res = await blocker;
        expectStatus(res, 200);
        expect(res.body.choices[0].finish_reason).toBe('stop');
      });

      it(`${kind}: abort during prompt evaluation: the device is told to stop and is free at once`, async () => {
        const since = new Date(Date.now() - 1);
        const target = request(`evaluating ${kind}`, stream);
        const assigned = await waitStatus(tenant.org.id, 'assigned', 15_000, queuedSince(since));
        await accepted(assigned.address);
        target.abort();
        await target.done;
        const row = await assertCancelled(assigned.address, true);
        expect(row.firstTokenAt).toBeNull();
        expect(row.outputSha256).toBeNull();
        const next = await chat(model, 'right after', { max_tokens: 2 });
        expectStatus(next, 200);
      });

      it(`${kind}: abort mid-answer: the task ends cancelled with the hash of what was relayed`, async () => {
        const prompt = `mid-answer ${kind}`;
        const since = new Date(Date.now() - 1);
        const target = request(prompt, stream);
        // This request's task: the only one of the model queued since (its row is written once queued).
        const address = (await waitTasks({ orgId: tenant.org.id, ...queuedSince(since) }, (r) => r.length === 1))[0]
          .address;
        if (target.live) {
          await target.live.waitFor(/"content":"[^"]+"/);
        } else {
          // From the task's live state (Redis), not its row, which is written behind and could lag past the answer.
          await eventually(async () => {
            const view = await http('GET', `${url().replace('/chat/completions', '')}/tasks/${address}`, {
              headers: bearer(tenant.key),
            });
            expect(view.body.status).toBe('streaming');
            return true;
          });
        }
        target.abort();
        await target.done;
        const row = await assertCancelled(address, true);
        expect(row.firstTokenAt).toBeTruthy();
        expect(row.outputSha256 ?? '').toMatch(/^[0-9a-f]{64}$/);
        if (target.live) {
          const expected = await reference(model, prompt);
          const content = sseContent(target.live.events);
          // what arrived is a prefix of the answer
          expect(expected.startsWith(content)).toBe(true);
          expect(target.live.events).not.toContain('[DONE]');
        }
      });
    }
  });

  it('no task row is left non-terminal', async () => {
    const rows = await waitAllTerminal(tenant.org.id, 20_000);
    for (const row of rows) {
      expect({ ok: Boolean(row.finishedAt), message: `${row.address} ${row.status} without finished_at` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      if (row.status === 'completed') {
        expect({
          ok: Boolean(row.outputSha256 && row.finishReason),
          message: `${row.address}: completed without hash or finish`,
        }).toEqual(expect.objectContaining({ ok: true }));
      } else {
        expect({ ok: Boolean(row.errorCode), message: `${row.address}: ${row.status} without an error code` }).toEqual(
          expect.objectContaining({ ok: true }),
        );
      }
    }
    expect({ ok: rows.length >= 20, message: `${rows.length} rows` }).toEqual(expect.objectContaining({ ok: true }));
  });
});
