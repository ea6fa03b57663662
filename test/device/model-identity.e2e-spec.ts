import {
  ADMIN_TOKEN,
  cli,
  closeDb,
  createDevice,
  createTenant,
  http,
  startApi,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { assertOpenAIError } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';
import { chat, eventually, logLines, startRuntimeDevice, taskRow, waitOffline } from './support/device';
import { FakeOllama, FakeOpenAI } from './support/fake-runtimes';

const HEX_A = 'a'.repeat(64);
const HEX_B = 'b'.repeat(64);

/**
 * Model identity (issue 35): each agent announces what its runtime says a model is; an admin pins the
 * digests a model may be served with; a device whose runtime reports another digest, or none, is
 * refused the model, also while connected when the pin changes; and each task record keeps the digest
 * it was served with. Real api, dispatcher and agents; fake runtimes in their wire formats upstream.
 */
describe('model identity: digests announced, pinned and recorded', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const model = uniq('pinned/llama3.2');
  const ollamaA = new FakeOllama(['llama3.2:3b']);
  const ollamaB = new FakeOllama(['llama3.2:3b']);
  const vllm = new FakeOpenAI(['meta-llama/Llama-3.2-3B-Instruct']);
  const agents: Proc[] = [];
  const tokens: Record<'a' | 'b' | 'vllm', string> = { a: '', b: '', vllm: '' };
  const ids: Record<'a' | 'b' | 'vllm', string> = { a: '', b: '', vllm: '' };

  const admin = (method: string, path: string, body?: unknown) =>
    http(method, `${api.url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body });
  const pin = (digests: string[]) =>
    admin('PATCH', `/admin/models/${encodeURIComponent(model)}`, { allowed_digests: digests });
  /** The refusals the agent logged from its last announce ack. */
  const refusals = (proc: Proc) =>
    logLines(proc)
      .filter((l) => Array.isArray(l.refused))
      .flatMap((l) => l.refused as { model: string; reason: string }[]);

  beforeAll(async () => {
    ollamaA.digest = HEX_A;
    ollamaB.digest = HEX_B.toUpperCase();
    for (const ollama of [ollamaA, ollamaB]) {
      ollama.handlers.set('*', FakeOllama.reply({ content: ['Hello', ' there'] }));
    }
    vllm.handlers.set('*', FakeOpenAI.reply({ choices: [['Hello', ' there']] }));
    await Promise.all([ollamaA.start(), ollamaB.start(), vllm.start()]);
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([model]);
    expectStatus(await pin([`sha256:${HEX_A}`]), 200);
    for (const name of ['a', 'b', 'vllm'] as const) {
      ({ id: ids[name], token: tokens[name] } = await createDevice());
    }
    agents.push(
      await startRuntimeDevice(dispatcher, tokens.a, {
        backend: 'ollama',
        upstream: ollamaA.url,
        models: [`${model}=llama3.2:3b`],
      }),
    );
    for (const [name, backend, upstream, upstreamModel] of [
      ['b', 'ollama', ollamaB.url, 'llama3.2:3b'],
      ['vllm', 'openai', vllm.baseUrl, 'meta-llama/Llama-3.2-3B-Instruct'],
    ] as const) {
      agents.push(
        await startRuntimeDevice(dispatcher, tokens[name], {
          backend,
          upstream,
          models: [`${model}=${upstreamModel}`],
          online: [],
        }),
      );
    }
  });

  afterAll(async () => {
    await Promise.all([...agents.map((a) => a.stop()), api?.stop(), dispatcher?.stop()]);
    await Promise.all([ollamaA.stop(), ollamaB.stop(), vllm.stop()]);
    await closeDb();
  });

  it('refuses a device whose runtime reports another digest (digest_mismatch) or none (digest_unknown)', async () => {
    const [, b, openai] = agents;
    await eventually(
      async () => [refusals(b), refusals(openai)],
      ([fromB, fromOpenai]) => fromB.length > 0 && fromOpenai.length > 0,
      'the refusals in the agents’ logs',
    );
    expect(refusals(b)).toEqual([{ model, reason: 'digest_mismatch' }]);
    expect(refusals(openai)).toEqual([{ model, reason: 'digest_unknown' }]);
    // An operator sees the digest each device announced for what it serves (what to pin).
    const shown = await admin('GET', `/admin/devices/${ids.a}`);
    expect([shown.body.models, shown.body.digests]).toEqual([[model], { [model]: `sha256:${HEX_A}` }]);
    expect((await admin('GET', `/admin/devices/${ids.b}`)).body.digests).toEqual({});
  });

  it('serves the model only from the device with the pinned digest, and the task record keeps that digest', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await chat(api, tenant, { model, messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 8 });
      expectStatus(res, 200);
    }
    expect([ollamaA.chats().length, ollamaB.chats().length, vllm.chats().length]).toEqual([3, 0, 0]);

    const row = await taskRow(tenant);
    expect(row.modelDigest).toBe(`sha256:${HEX_A}`);
    const view = await http('GET', `${api.url}/v1/tasks/${row.address}`, {
      headers: { authorization: `Bearer ${tenant.key}` },
    });
    expectStatus(view, 200);
    expect(view.body.model_digest).toBe(`sha256:${HEX_A}`);
  });

  it('a new pin applies to connected devices: the one it names gains the model, the other loses it', async () => {
    const changed = await pin([`sha256:${HEX_B}`]);
    expectStatus(changed, 200);
    expect(changed.body.allowed_digests).toEqual([`sha256:${HEX_B}`]);
    await waitOffline(tokens.a, model);
    await eventually(
      () => chat(api, tenant, { model, messages: [{ role: 'user', content: 'again' }], max_tokens: 8 }),
      (res) => res.status === 200,
      'the device with the new digest serving the model',
    );
    // Ollama B lists its digest in capitals: announced, pinned and recorded as sha256:<lowercase hex>.
    expect((await taskRow(tenant)).modelDigest).toBe(`sha256:${HEX_B}`);
    expect(ollamaB.chats().length).toBeGreaterThan(0);
    const servedByA = ollamaA.chats().length;

    // No pin: every device serves it again, the one whose runtime gives no digest too (its tasks record none).
    expectStatus(await pin([]), 200);
    await eventually(
      () => chat(api, tenant, { model, messages: [{ role: 'user', content: 'any' }], max_tokens: 8 }),
      (res) => res.status === 200 && vllm.chats().length > 0 && ollamaA.chats().length > servedByA,
      'every device serving the model again',
    );
  });

  it('bad pins are 400 and change nothing; the CLI pins and clears as the API does', async () => {
    const path = `/admin/models/${encodeURIComponent(model)}`;
    expectStatus(await pin([]), 200);
    for (const [digests, param] of [
      [[HEX_A], 'allowed_digests'],
      [['sha256:xyz'], 'allowed_digests'],
      [[`sha256:${HEX_A.toUpperCase()}`], 'allowed_digests'],
      [Array(33).fill(`sha256:${HEX_A}`), 'allowed_digests'],
      ['sha256:a', 'allowed_digests'],
      [[1], 'allowed_digests[0]'],
    ] as const) {
      assertOpenAIError(await admin('PATCH', path, { allowed_digests: digests }), 400, 'invalid_request', param);
    }
    const listed = async () =>
      (await admin('GET', '/admin/models')).body.data.find((m: { id: string }) => m.id === model);
    expect((await listed()).allowed_digests).toEqual([]);

    const set = await cli(['--json', 'model', 'digests', model, '--allow', `sha256:${HEX_B}`, `sha256:${HEX_A}`]);
    expect(set.code).toBe(0);
    expect(JSON.parse(set.stdout).allowed_digests).toEqual([`sha256:${HEX_A}`, `sha256:${HEX_B}`]);
    expect((await listed()).allowed_digests).toEqual([`sha256:${HEX_A}`, `sha256:${HEX_B}`]);
    const neither = await cli(['model', 'digests', model]);
    expect([neither.code, neither.stderr]).toEqual([
      1,
      expect.stringContaining('give either --allow <digest...> or --clear'),
    ]);
    const bad = await cli(['model', 'digests', model, '--allow', 'md5:abc']);
    expect([bad.code, bad.stderr]).toEqual([1, expect.stringContaining('allowed_digests')]);
    const cleared = await cli(['--json', 'model', 'digests', model, '--clear']);
    expect([cleared.code, JSON.parse(cleared.stdout).allowed_digests]).toEqual([0, []]);
  });
});
