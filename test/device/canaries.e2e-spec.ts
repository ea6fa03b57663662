import type { IncomingMessage } from 'node:http';
import {
  ADMIN_TOKEN,
  cli,
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  startApi,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import { metricValue } from '../reliability/helpers';
import { chat, eventually, startRuntimeDevice } from './support/device';
import { FakeOllama } from './support/fake-runtimes';
import type { ChatHandler, Recorded } from './support/fake-runtimes';

const QUESTION = 'What is the capital of France? Answer with one word.';
const ANSWER = 'Paris';
/** What the honest runtime answers any other prompt (in four chunks, 40 ms apart: a queue can form). */
const REPLY = ['Hello', ' there', ', how', ' are you?'];

/** The last user message of a chat request a fake runtime received. */
const lastUser = (body: any): string =>
  [...(body.messages as { role: string; content: string }[])].reverse().find((m) => m.role === 'user')?.content ?? '';
const isCanary = (r: Recorded) => lastUser(r.body) === QUESTION;

/**
 * Canary prompts (issue 35): an admin registers a prompt with a known answer per model; the dispatcher
 * sends it to network devices serving the model, before their first network task (probation) and then
 * every CANARY_INTERVAL_MS while they are idle. A device whose runtime answers as registered is
 * trusted; one that answers otherwise is quarantined by its first canary and gets no network task.
 * Canaries leave no trace in an organization's tasks or usage, and never go out while a job waits.
 * Real api, dispatcher and agents; fake Ollama runtimes in its wire format upstream of the agents.
 */
describe('canaries: devices earn trust by answering prompts with a known answer', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const model = uniq('canaried/llama3.2');
  /** Runs the model: answers the canary's question as registered, anything else with REPLY. */
  const honest = new FakeOllama(['llama3.2:3b']);
  /** Serves a 1B model under the name: every answer is its own text. */
  const liar = new FakeOllama(['llama3.2:3b']);
  const agents: Proc[] = [];
  const ids = { honest: '', liar: '' };
  /** While set, the honest runtime holds organizations' requests (not canaries) until it resolves. */
  let gate: Promise<void> | null = null;

  const admin = (method: string, path: string, body?: unknown) =>
    http(method, `${api.url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body });
  const trustOf = async (id: string) => (await admin('GET', `/admin/devices/${id}`)).body.trust;
  const canaries = async () => {
    const text = (await http('GET', `${dispatcher.url}/metrics`)).text;
    return {
      passed: metricValue(text, 'switchyard_canaries_total', { result: 'passed' }) || 0,
      failed: metricValue(text, 'switchyard_canaries_total', { result: 'failed' }) || 0,
      inconclusive: metricValue(text, 'switchyard_canaries_total', { result: 'inconclusive' }) || 0,
    };
  };

  const answerBy =
    (text: (req: IncomingMessage, body: any) => string[]): ChatHandler =>
    (ctx) =>
      FakeOllama.reply({ content: text(ctx.req, ctx.body), intervalMs: 40 })(ctx);

  beforeAll(async () => {
    const answer = answerBy((_req, body) => (lastUser(body) === QUESTION ? [ANSWER] : REPLY));
    honest.handlers.set('*', async (ctx) => {
      if (gate && lastUser(ctx.body) !== QUESTION) {
        await gate;
      }
      await answer(ctx);
    });
    liar.handlers.set(
      '*',
      answerBy(() => ['I', ' am', ' small']),
    );
    await Promise.all([honest.start(), liar.start()]);
    // Short: the suite sees many canaries; jittered, only while idle, as in production.
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher({ CANARY_INTERVAL_MS: '100' })]);
    tenant = await createTenant([model]);
  });

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGKILL')));
    await Promise.all([api?.stop(), dispatcher?.stop(), honest.stop(), liar.stop()]);
    await closeDb();
  });

  test('admins register, list and remove canaries through the API and the CLI; bad ones are refused whole', async () => {
    const path = `/admin/models/${encodeURIComponent(model)}/canaries`;
    const bad = [
      { messages: [], max_tokens: 8, expect: { equals: 'x' } },
      { messages: [{ role: 'assistant', content: 'x' }], max_tokens: 8, expect: { equals: 'x' } },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 0, expect: { equals: 'x' } },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 8, expect: { equals: 'x', contains: 'y' } },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 8, expect: { matches: 'x' } },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 8, expect: { equals: '' } },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 8, expect: { equals: 'x' }, extra: 1 },
    ];
    for (const body of bad) {
      const res = await admin('POST', path, body);
      expectStatus(res, 400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    const unknown = await admin('POST', `/admin/models/${uniq('nope')}/canaries`, {
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 8,
      expect: { equals: 'x' },
    });
    expectStatus(unknown, 404);
    expect(unknown.body.error.code).toBe('model_not_found');
    // An embedding model answers no chat prompt.
    const embedding = uniq('embed');
    await db().model.create({ data: { id: embedding, kind: 'embedding' } });
    const refused = await admin('POST', `/admin/models/${embedding}/canaries`, {
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 8,
      expect: { equals: 'x' },
    });
    expectStatus(refused, 400);
    expect(refused.body.error).toMatchObject({ code: 'not_a_chat_model', param: 'model' });
    expect((await admin('GET', path)).body).toEqual({ object: 'list', data: [] });

    // Through the CLI: added, listed, removed.
    const added = await cli(['--json', 'canary', 'add', model, '--prompt', 'Say OK.', '--contains', 'OK']);
    expect(added).toMatchObject({ code: 0 });
    const made = JSON.parse(added.stdout);
    expect(made).toMatchObject({
      model,
      messages: [{ role: 'user', content: 'Say OK.' }],
      max_tokens: 64,
      expect: { contains: 'OK' },
    });
    expect((await admin('GET', path)).body.data).toEqual([made]);
    expect(JSON.parse((await cli(['--json', 'canary', 'list', model])).stdout).data).toEqual([made]);
    expect(await cli(['canary', 'remove', made.id])).toMatchObject({ code: 0 });
    const gone = await admin('DELETE', `/admin/canaries/${made.id}`);
    expectStatus(gone, 404);
    expect(gone.body.error.code).toBe('canary_not_found');
    expect(await cli(['canary', 'add', model, '--prompt', 'x'])).toMatchObject({ code: 1 });

    // The one the rest of the suite uses, through the API.
    const created = await admin('POST', path, {
      messages: [{ role: 'user', content: QUESTION }],
      max_tokens: 8,
      expect: { equals: ANSWER },
    });
    expectStatus(created, 201);
    expect(created.body).toMatchObject({ model, max_tokens: 8, expect: { equals: ANSWER } });
  });

  test('a lying device is quarantined by its first canary and gets no network task; the honest one serves', async () => {
    for (const [name, runtime] of [
      ['honest', honest],
      ['liar', liar],
    ] as const) {
      const device = await createDevice();
      ids[name] = device.id;
      expect((await trustOf(device.id)).state).toBe('probation');
      // On probation it is not online for the network (no presence): nothing to wait for.
      agents.push(
        await startRuntimeDevice(dispatcher, device.token, {
          backend: 'ollama',
          upstream: runtime.url,
          models: [`${model}=llama3.2:3b`],
          online: [],
        }),
      );
    }
    await eventually(
      () => trustOf(ids.liar),
      (t) => t.state === 'quarantined',
      'the liar to be quarantined',
    );
    expect(await trustOf(ids.liar)).toMatchObject({
      state: 'quarantined',
      canaries_passed: 0,
      canaries_failed: 1,
      last_canary_at: expect.any(String),
      reason: expect.stringMatching(/otherwise than registered: "I am small"$/),
    });
    await eventually(
      () => trustOf(ids.honest),
      (t) => t.state === 'trusted',
      'the honest device to be trusted',
    );
    expect(await trustOf(ids.honest)).toMatchObject({ reason: `answered a canary of ${model} as registered` });

    // The canary reached the liar's runtime as an ordinary request: the prompt, at temperature 0.
    expect(liar.chats()).toHaveLength(1);
    const [sent] = liar.chats();
    expect(sent.body).toMatchObject({
      model: 'llama3.2:3b',
      messages: [{ role: 'user', content: QUESTION }],
      options: { temperature: 0, num_predict: 8 },
    });

    for (let i = 0; i < 5; i++) {
      const res = await chat(api, tenant, { model });
      expectStatus(res, 200);
      expect(res.body.choices[0].message.content).toBe(REPLY.join(''));
    }
    // Nothing more reached the liar.
    expect(liar.chats()).toHaveLength(1);
  });

  test('the honest device passes 50 canaries at a short interval and stays trusted', async () => {
    await eventually(
      () => trustOf(ids.honest),
      (t) => t.canaries_passed >= 50,
      '50 canaries passed',
      60_000,
    );
    expect(await trustOf(ids.honest)).toMatchObject({ state: 'trusted', canaries_failed: 0 });
    expect(honest.chats().filter(isCanary).length).toBeGreaterThanOrEqual(50);
  });

  test('no canary goes out while a job waits, and canaries leave no trace in the organization’s tasks or usage', async () => {
    await recordsWritten();
    const orgTasksBefore = await db().task.count({ where: { orgId: tenant.org.id } });
    // Six requests for the one trusted device: the runtime holds the first until the other five wait
    // in the queue; from then until the last one starts, a job always waits.
    let open!: () => void;
    gate = new Promise((resolve) => (open = resolve));
    const from = honest.chats().length;
    const before = await canaries();
    const pending = Promise.all(Array.from({ length: 6 }, () => chat(api, tenant, { model })));
    await eventually(
      () => admin('GET', '/admin/queues'),
      (res) => res.body.data.some((q: { model: string; waiting: number }) => q.model === model && q.waiting === 5),
      'five requests waiting',
    );
    open();
    gate = null;
    const answers = await pending;
    answers.forEach((res) => expectStatus(res, 200));
    const during = honest.chats().slice(from);
    const orgRequests = during.map((r, i) => ({ i, canary: isCanary(r) })).filter((r) => !r.canary);
    expect(orgRequests).toHaveLength(6);
    // Between the first and the last organization request the device received, jobs were waiting:
    // no canary in between.
    const first = orgRequests[0].i;
    const last = orgRequests[orgRequests.length - 1].i;
    expect(during.slice(first, last + 1).filter(isCanary)).toEqual([]);
    // Nor was one sent to the busy device (its agent would have refused it: a canary without an answer).
    expect((await canaries()).inconclusive).toBe(before.inconclusive);
    // While the canaries went on before and after (the sender was not idle meanwhile).
    await eventually(
      () => canaries(),
      (c) => c.passed > before.passed,
      'a canary after the backlog',
    );

    // Canaries: no task rows, no usage. Every row of the org is one of its requests (read once the
    // record writer has caught up: a row's device is written after the answer went out).
    await recordsWritten();
    const orgTasks = await db().task.findMany({ where: { orgId: tenant.org.id } });
    expect(orgTasks.length - orgTasksBefore).toBe(6);
    const allOfDevice = await db().task.count({ where: { deviceId: ids.honest } });
    expect(allOfDevice).toBe(orgTasks.length);
    const usage = await http('GET', `${api.url}/v1/usage`, { headers: { authorization: `Bearer ${tenant.key}` } });
    expectStatus(usage, 200);
    expect(JSON.stringify(usage.body)).toMatch(new RegExp(`"requests":${orgTasks.length}\\b`));
  });

  test('removing the last canary of a model ends probation for new devices: trusted on announce', async () => {
    const listed = await admin('GET', `/admin/models/${encodeURIComponent(model)}/canaries`);
    for (const c of listed.body.data) {
      expectStatus(await admin('DELETE', `/admin/canaries/${c.id}`), 200);
    }
    const device = await createDevice();
    agents.push(
      await startRuntimeDevice(dispatcher, device.token, {
        backend: 'ollama',
        upstream: honest.url,
        models: [`${model}=llama3.2:3b`],
      }),
    );
    expect(await trustOf(device.id)).toMatchObject({
      state: 'trusted',
      reason: 'trusted on announce: no canaries for its models',
      canaries_passed: 0,
    });
  });
});
