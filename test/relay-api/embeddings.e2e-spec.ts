import OpenAI from 'openai';
import { decodeVector } from '@app/common';
import { simEmbedding } from '../../apps/device/src/backends/sim-embedding';
import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  startApi,
  startDevice,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';

/**
 * Embeddings through the real api, dispatcher and sim agents (issue 38): the vectors a client gets
 * are the sim's own for each input, in input order, however the request was split into batches and
 * whichever devices embedded them. The sim's vectors are a function of the text (simEmbedding), so
 * each one is checked bit for bit.
 */
const BATCH = 16;
const DIMENSIONS = 48;

/** What a client gets for an input: the sim's float32 values. */
const expected = (input: string | number[], dimensions = DIMENSIONS) => simEmbedding(input, dimensions);
/**
 * A vector as a client parsed it, as float32 values: the float answer writes each value as the
 * shortest decimal that reads back as the same float32 (as Ollama and OpenAI do), so a client's double
 * is not the float32's exact value, but rounds back to it.
 */
const f32 = (values: number[]) => Float32Array.from(values);

describe('embeddings through devices', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  let tenant: Tenant;
  let client: OpenAI;
  const model = uniq('nomic-embed-text');
  const chatModel = uniq('llama3.2:3b');

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi({ EMBED_BATCH_MAX: String(BATCH) }), startDispatcher()]);
    await db().model.create({ data: { id: model, network: true, kind: 'embedding' } });
    tenant = await createTenant([model, chatModel]);
    client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    for (let i = 0; i < 3; i++) {
      const { token } = await createDevice();
      // Each batch takes the sim 300 ms: a device holds at most two, so a request of many batches spreads.
      devices.push(
        await startDevice(dispatcher, token, {
          models: [model, chatModel],
          ttftMs: 300,
          extraArgs: ['--sim-embedding-dimensions', String(DIMENSIONS)],
        }),
      );
    }
  });

  afterAll(async () => {
    await Promise.all([...devices.map((d) => d.stop()), api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  it('the openai SDK gets each input its vector, as floats and as base64 (its default), with usage', async () => {
    const input = ['The food was delicious', 'and the waiter was friendly.'];
    const floats = await client.embeddings.create({ model, input, encoding_format: 'float' });
    expect(floats.object).toBe('list');
    expect(floats.model).toBe(model);
    expect(floats.data.map((d) => d.index)).toEqual([0, 1]);
    expect(floats.data.map((d) => f32(d.embedding))).toEqual(input.map((text) => expected(text)));
    // The sim counts words, as it counts a chat prompt.
    expect(floats.usage).toEqual({ prompt_tokens: 9, total_tokens: 9 });
    // Without encoding_format the SDK asks for base64 and decodes it itself.
    const decoded = await client.embeddings.create({ model, input });
    expect(decoded.data.map((d) => f32(d.embedding))).toEqual(input.map((text) => expected(text)));
  });

  it('a request larger than a batch is split across the devices and comes back whole, in input order', async () => {
    const own = await createTenant([model]);
    const input = Array.from({ length: 150 }, (_, i) => `input number ${i}: ${'word '.repeat(i % 7)}`);
    const res = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${own.key}` },
      body: { model, input, encoding_format: 'base64' },
    });
    expectStatus(res, 200);
    expect(res.body.data).toHaveLength(150);
    res.body.data.forEach((d: { index: number; embedding: string }, i: number) => {
      expect(d.index).toBe(i);
      expect(decodeVector(d.embedding)).toEqual(expected(input[i]));
    });
    // One task per batch, each recorded completed; the batches went to more than one device.
    await recordsWritten();
    const batches = await db().task.findMany({ where: { orgId: own.org.id } });
    expect(batches).toHaveLength(Math.ceil(150 / BATCH));
    expect(batches.every((t) => t.status === 'completed' && t.kind === 'embedding' && t.completionTokens === 0)).toBe(
      true,
    );
    // Ten batches, three devices that hold two each at most: more than one device embedded them.
    expect(new Set(batches.map((t) => t.deviceId)).size).toBeGreaterThan(1);
  });

  it('token ids and dimensions go to devices that can take them; the vector is the shortened one', async () => {
    const res = await client.embeddings.create({
      model,
      input: [[101, 2023, 102]],
      dimensions: 8,
      encoding_format: 'float',
    });
    expect(f32(res.data[0].embedding)).toEqual(expected([101, 2023, 102], 8));
    expect(res.usage.prompt_tokens).toBe(3);
  });

  it('a chat model is not an embedding model, nor an embedding model a chat model: 400 with a code that says which', async () => {
    const embedChat = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model: chatModel, input: 'hello' },
    });
    expectStatus(embedChat, 400);
    expect(embedChat.body.error).toMatchObject({ code: 'not_an_embedding_model', param: 'model' });
    const chatEmbed = await http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, messages: [{ role: 'user', content: 'hello' }] },
    });
    expectStatus(chatEmbed, 400);
    expect(chatEmbed.body.error).toMatchObject({ code: 'not_a_chat_model', param: 'model' });
  });

  it('refuses what OpenAI refuses, with nothing queued: an empty string, more than 2,048 inputs', async () => {
    await recordsWritten();
    const before = await db().task.count({ where: { orgId: tenant.org.id } });
    const empty = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, input: '' },
    });
    expectStatus(empty, 400);
    expect(empty.body.error.message).toContain("'$.input' is invalid");
    const many = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, input: Array.from({ length: 2049 }, () => 'x') },
    });
    expectStatus(many, 400);
    expect(many.body.error.param).toBe('input');
    await recordsWritten();
    expect(await db().task.count({ where: { orgId: tenant.org.id } })).toBe(before);
  });

  it('a device takes the next batch beside the one it runs: its runtime gets it before the first is done', async () => {
    // One device alone serves this model, and its sim takes a second to answer each batch.
    const slow = uniq('slow-embed');
    await db().model.create({ data: { id: slow, network: true, kind: 'embedding' } });
    const own = await createTenant([slow]);
    const { token } = await createDevice();
    devices.push(
      await startDevice(dispatcher, token, {
        models: [slow],
        ttftMs: 1_000,
        extraArgs: ['--sim-embedding-dimensions', String(DIMENSIONS)],
      }),
    );
    const input = Array.from({ length: BATCH * 3 }, (_, i) => `pipelined ${i}`);
    const res = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${own.key}` },
      body: { model: slow, input, encoding_format: 'base64' },
    });
    expectStatus(res, 200);
    expect(res.body.data.map((d: { embedding: string }) => decodeVector(d.embedding))).toEqual(
      input.map((t) => expected(t)),
    );
    await recordsWritten();
    const batches = await db().task.findMany({ where: { orgId: own.org.id }, orderBy: { assignedAt: 'asc' } });
    expect(batches).toHaveLength(3);
    expect(new Set(batches.map((t) => t.deviceId)).size).toBe(1);
    // The second batch was assigned right after the first, which still had most of its second to run.
    // (The sim runs the two at once, so when the third comes depends on which of them ends first.)
    expect(batches[1].assignedAt!.getTime()).toBeLessThan(batches[0].finishedAt!.getTime());
  });

  it("an organization's concurrency limit counts a request of many batches once", async () => {
    const limited = await createTenant([model]);
    await db().organization.update({ where: { id: limited.org.id }, data: { concurrencyLimit: 1 } });
    const input = Array.from({ length: BATCH * 3 }, (_, i) => `limited ${i}`);
    const res = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${limited.key}` },
      body: { model, input, encoding_format: 'float' },
    });
    expectStatus(res, 200);
    expect(res.body.data.map((d: { embedding: number[] }) => f32(d.embedding))).toEqual(input.map((t) => expected(t)));
  });

  it("Ollama's /api/embed and /api/embeddings, and the /openai/v1 and /v2/ollama aliases, answer the same vectors", async () => {
    const auth = { authorization: `Bearer ${tenant.key}` };
    const embed = await http('POST', `${api.url}/api/embed`, { headers: auth, body: { model, input: ['a b', 'c'] } });
    expectStatus(embed, 200);
    expect(embed.body).toMatchObject({ model, prompt_eval_count: 3 });
    expect(embed.body.embeddings.map(f32)).toEqual([expected('a b'), expected('c')]);
    expect(embed.body.total_duration).toBeGreaterThan(0);
    const alias = await http('POST', `${api.url}/v2/ollama/api/embed`, { headers: auth, body: { model, input: 'c' } });
    expect(alias.body.embeddings.map(f32)).toEqual([expected('c')]);
    const legacy = await http('POST', `${api.url}/api/embeddings`, { headers: auth, body: { model, prompt: 'c' } });
    expectStatus(legacy, 200);
    expect(Object.keys(legacy.body)).toEqual(['embedding']);
    expect(f32(legacy.body.embedding)).toEqual(expected('c'));
    const openai = await http('POST', `${api.url}/openai/v1/embeddings`, {
      headers: auth,
      body: { model, input: 'c', encoding_format: 'float' },
    });
    expect(f32(openai.body.data[0].embedding)).toEqual(expected('c'));
  });
});
