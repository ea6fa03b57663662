import { closeDb, createDevice, createTenant, db, http, recordsWritten, sleep, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  LiveStream,
  TERMINAL,
  bearer,
  chatBody,
  sha256,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitAllTerminal,
  waitOnline,
  waitStatus,
  waitTasks,
  within,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/** Every sim device of this suite writes replies of this many tokens, so any of them gives the same answer. */
const TOKENS = 20;
/**
 * A job held by a dead dispatcher comes back when its BullMQ lock (30 s, JOB_LOCK_MS) has expired
 * and a stalled-job check (every 15 s) has seen it: up to about 45 s, plus the answer itself.
 */
const RECOVERY_MS = 75_000;

/**
 * Chaos among the servers: two api and two dispatcher instances serving at once, and a dispatcher
 * killed (SIGKILL) while it holds tasks that are queued, assigned and streaming. Each case checks
 * that every request ends with a whole answer or an explicit error, that no output arrives twice
 * (the content equals the sim's deterministic reply, or is a prefix of it when the request
 * failed), that every task row ends, and that the system serves normally afterwards.
 */
describe('chaos: api and dispatcher instances', () => {
  let apiA: Api;
  let apiB: Api;
  let d1: Dispatcher;
  let d2: Dispatcher;
  let tenant: Tenant;
  const devices: Proc[] = [];
  const servers: { proc: Proc }[] = [];
  const shared = uniq('shared');
  const streamed = uniq('streamed');
  const assigned = uniq('assigned');
  const queued = uniq('queued');
  const ids: Record<string, string> = {};
  /** Device names in the order of `devices`. */
  const order: string[] = [];
  const tokens: Record<string, string> = {};
  const references = new Map<string, string>();

  beforeAll(async () => {
    const env = { QUEUE_TIMEOUT_MS: '120000', LOG_LEVEL: 'info' };
    [apiA, apiB, d1, d2] = await Promise.all([
      startApi(env),
      startApi(env),
      startDispatcher(env),
      startDispatcher(env),
    ]);
    servers.push(apiA, apiB, d1, d2);
    tenant = await createTenant([shared, streamed, assigned, queued]);
    const specs: [string, Dispatcher, string[], { ttftMs?: number; tokensPerSecond?: number }][] = [
      ['f1', d1, [shared], { tokensPerSecond: 100 }],
      ['f2', d2, [shared], { tokensPerSecond: 100 }],
      // On the dispatcher that dies: one device streaming, one still evaluating its prompt.
      ['streaming', d1, [streamed], { tokensPerSecond: 3 }],
      ['evaluating', d1, [assigned], { ttftMs: 6_000, tokensPerSecond: 20 }],
      // On the one that lives: busy when the other dies, then takes everything over.
      ['survivor', d2, [streamed, assigned, queued], { tokensPerSecond: 3 }],
    ];
    await Promise.all(
      specs.map(async ([name, dispatcher, models, opts]) => {
        const { id, token } = await createDevice();
        ids[name] = id;
        tokens[name] = token;
        const proc = await startDevice(dispatcher.url, token, { models, tokens: TOKENS, ...opts });
        devices.push(proc);
        order.push(name);
      }),
    );
  });

  afterAll(async () => {
    await stopAll(devices, servers);
    await closeDb();
  });

  const url = (api: Api) => `${api.url}/v1/chat/completions`;
  const chat = (api: Api, model: string, content: string) =>
    http('POST', url(api), { headers: bearer(tenant.key), body: chatBody(model, content) });

  /** The deterministic reply for a prompt (non-streamed, from any healthy device). */
  async function reference(model: string, prompt: string, api: Api = apiA): Promise<string> {
    const key = `${model}\u0000${prompt}`;
    if (!references.has(key)) {
      const res = await chat(api, model, prompt);
      expect({ status: res.status, message: `the system does not serve normally: ${res.text}` }).toEqual(
        expect.objectContaining({ status: 200 }),
      );
      expect(res.body.choices[0].finish_reason).toBe('stop');
      references.set(key, res.body.choices[0].message.content);
    }
    return references.get(key)!;
  }

  function assertWholeStream(live: LiveStream, expected: string, what: string): void {
    expect({ status: live.status, message: `${what}: ${live.text}` }).toEqual(expect.objectContaining({ status: 200 }));
    const events = live.events;
    expect({ actual: events.at(-1), message: `${what}: ${live.text.slice(-300)}` }).toEqual(
      expect.objectContaining({ actual: '[DONE]' }),
    );
    expect({
      ok: !events.some((e) => e !== '[DONE]' && e.error),
      message: `${what}: ${live.text.slice(-300)}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    const roles = events.filter((e) => e !== '[DONE]' && e.choices?.some((c: any) => c.delta?.role));
    expect({ length: roles.length, message: `${what}: the role chunk came once` }).toEqual(
      expect.objectContaining({ length: 1 }),
    );
    expect({ actual: sseContent(events), message: `${what}: the content, exactly once` }).toEqual(
      expect.objectContaining({ actual: expected }),
    );
  }

  /** A round of requests spread over both apis (and so over both dispatchers' devices), all answered whole. */
  async function round(label: string) {
    const prompts = ['one', 'two', 'three'].map((p) => `${label} ${p}`);
    const requests = Array.from({ length: 12 }, (_, i) => {
      const api = i % 2 === 0 ? apiA : apiB;
      const prompt = prompts[i % 3];
      if (i % 4 < 2) {
        return { prompt, live: new LiveStream(url(api), tenant.key, chatBody(shared, prompt, { stream: true })) };
      }
      return { prompt, res: chat(api, shared, prompt) };
    });
    const contents: [string, string, string][] = [];
    for (const r of requests) {
      if (r.live) {
        await within(r.live.done, 60_000, 'a streamed request');
        expect({ actual: r.live.events.at(-1), message: r.live.text.slice(-300) }).toEqual(
          expect.objectContaining({ actual: '[DONE]' }),
        );
        contents.push([r.prompt, sseContent(r.live.events), r.live.events[0].task_address]);
      } else {
        const res = await within(r.res, 60_000, 'a request');
        expectStatus(res, 200);
        contents.push([r.prompt, res.body.choices[0].message.content, res.body.task_address]);
      }
    }
    for (const [prompt, content] of contents) {
      expect({ content, message: `the answer to "${prompt}"` }).toEqual(
        expect.objectContaining({ content: await reference(shared, prompt) }),
      );
    }
    const rows = await waitTasks(
      { address: { in: contents.map((c) => c[2]) } },
      (r) => r.length === 12 && r.every((t) => t.status === 'completed'),
    );
    return rows;
  }

  it('two api and two dispatcher instances serve at once: requests spread, all complete', async () => {
    const rows = await round('before');
    const served = new Set(rows.map((r) => r.deviceId));
    // devices of both dispatchers served
    expect(served.has(ids.f1)).toBe(true);
    expect(served.has(ids.f2)).toBe(true);
    // A task is visible through either api.
    for (const api of [apiA, apiB]) {
      const res = await http('GET', `${api.url}/v1/tasks/${rows[0].address}`, { headers: bearer(tenant.key) });
      expectStatus(res, 200);
      expect(res.body.status).toBe('completed');
    }
  });

  it('SIGKILL on a dispatcher holding queued, assigned and streaming tasks: each ends whole or with an explicit error', async () => {
    // The survivor is busy, so that the next tasks go to the doomed dispatcher's devices or wait.
    const busy = chat(apiB, queued, 'keeps the survivor busy');
    await waitStatus(tenant.org.id, 'streaming', 15_000, { modelId: queued });
    const streaming = new LiveStream(
      url(apiA),
      tenant.key,
      chatBody(streamed, 'streams when it dies', { stream: true }),
    );
    await streaming.waitFor(/"content":"[^"]+"/);
    const evaluating = new LiveStream(
      url(apiB),
      tenant.key,
      chatBody(assigned, 'thinks when it dies', { stream: true }),
    );
    // The stream opens once the device has accepted the task.
    await evaluating.waitFor(/"role":"assistant"/);
    const waiting = [
      chat(apiA, queued, 'waits when it dies (a)'),
      new LiveStream(url(apiB), tenant.key, chatBody(queued, 'waits when it dies (b)', { stream: true })),
    ] as const;
    await waitTasks(
      { orgId: tenant.org.id, modelId: queued, status: 'queued' },
      (r) => r.length === 2,
      15_000,
      'two queued tasks',
    );
    // Rows are written behind by four writers, each at its own pace: every record so far, then the rows.
    await recordsWritten();
    const states = (await db().task.findMany({ where: { orgId: tenant.org.id, status: { notIn: TERMINAL as any } } }))
      .map((t) => `${t.modelId === streamed ? 'streamed' : t.modelId === assigned ? 'assigned' : 'queued'}:${t.status}`)
      .sort();
    expect(states).toEqual([
      'assigned:assigned',
      'queued:queued',
      'queued:queued',
      'queued:streaming',
      'streamed:streaming',
    ]);

    d1.proc.child.kill('SIGKILL');
    await d1.proc.exited;
    // Brought back on the same port: its devices reconnect there.
    await sleep(2_000);
    const restarted = await startDispatcher({ QUEUE_TIMEOUT_MS: '120000', LOG_LEVEL: 'info' }, d1.port);
    servers.push(restarted);

    // Queued and busy tasks: whole answers.
    const busyRes = await within(busy, RECOVERY_MS, 'the busy task');
    expectStatus(busyRes, 200);
    const waitingRes = await within(waiting[0], RECOVERY_MS, 'a queued task');
    expectStatus(waitingRes, 200);
    await within(waiting[1].done, RECOVERY_MS, 'a queued stream');

    // The streaming task is resumed by the survivor's takeover on another device: one whole stream.
    await within(streaming.done, RECOVERY_MS, 'the streaming task');

    // The assigned task (no output yet) comes back from the stalled check and is served whole.
    await within(evaluating.done, RECOVERY_MS, 'the assigned task');

    // Compare with the deterministic replies, which also shows the system serves normally again. A fast
    // device takes over from the slow ones (same reply length, so the same replies) to keep this short.
    const fast = await createDevice();
    devices.push(
      await startDevice(d2.url, fast.token, {
        models: [streamed, assigned, queued],
        tokens: TOKENS,
        tokensPerSecond: 200,
      }),
    );
    await Promise.all(['streaming', 'evaluating', 'survivor'].map((n) => devices[order.indexOf(n)].stop('SIGKILL')));
    const [r0, r1, r2, r3, r4] = await Promise.all([
      reference(queued, 'keeps the survivor busy', apiB),
      reference(queued, 'waits when it dies (a)'),
      reference(queued, 'waits when it dies (b)', apiB),
      reference(assigned, 'thinks when it dies'),
      reference(streamed, 'streams when it dies'),
    ]);
    expect(busyRes.body.choices[0].message.content).toBe(r0);
    expect(waitingRes.body.choices[0].message.content).toBe(r1);
    assertWholeStream(waiting[1], r2, 'the queued stream');
    assertWholeStream(evaluating, r3, 'the assigned stream');
    assertWholeStream(streaming, r4, 'the resumed stream');

    const rows = await waitAllTerminal(tenant.org.id, 30_000);
    const byAddress = new Map(rows.map((r) => [r.address, r]));
    const resumed = byAddress.get(streaming.events[0].task_address)!;
    expect(resumed).toMatchObject({ status: 'completed', resumes: 1 });
    expect(resumed.outputSha256).toBe(sha256(r4));
    const moved = byAddress.get(evaluating.events[0].task_address)!;
    expect(moved.status).toBe('completed');
    expect({ ok: moved.attempts >= 2, message: `attempts ${moved.attempts}` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    expect(moved.outputSha256).toBe(sha256(sseContent(evaluating.events)));
    for (const row of rows) {
      expect({ ok: Boolean(row.finishedAt), message: `${row.address}: ${row.status} without finished_at` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
  }, 150_000);

  it('after the storm: both apis and both dispatchers serve a full round again', async () => {
    // The fast device of the killed dispatcher is back, on its restarted instance.
    await waitOnline([shared], tokens.f1);
    const rows = await round('after');
    const served = new Set(rows.map((r) => r.deviceId));
    // devices of both dispatchers served
    expect(served.has(ids.f1)).toBe(true);
    expect(served.has(ids.f2)).toBe(true);
    await waitAllTerminal(tenant.org.id, 10_000);
  });
});
