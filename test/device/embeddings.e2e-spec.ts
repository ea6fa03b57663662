import { createOpenAI } from '@ai-sdk/openai';
import { OllamaEmbeddings } from '@langchain/ollama';
import { OpenAIEmbeddings } from '@langchain/openai';
import { embedMany } from 'ai';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import {
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
import { startRuntimeDevice } from './support/device';
import { FakeOllama, FakeOpenAI, fakeEmbedding } from './support/fake-runtimes';

/**
 * Embeddings through real agents on the fake Ollama and the fake OpenAI-compatible server (vLLM's
 * wire format), called with the clients applications use (issue 38): the openai SDK, LangChain's
 * OpenAIEmbeddings and OllamaEmbeddings, the Vercel AI SDK's embedMany, and the ollama client. Each
 * vector must be what the fake runtime returned, bit for bit as float32.
 */
const DIMENSIONS = 64;
const BATCH = 8;

/** The fake runtime's vector for an input, as float32 values. */
const fake = (input: string | number[], dimensions = DIMENSIONS) => Float32Array.from(fakeEmbedding(input, dimensions));
/** A vector as a client parsed it, as float32 values. */
const f32 = (values: ArrayLike<number>) => Float32Array.from(values);

describe('embeddings on real runtimes, through real clients', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const devices: Proc[] = [];
  const ollama = new FakeOllama(['nomic-embed-text']);
  const vllmA = new FakeOpenAI(['BAAI/bge-m3']);
  const vllmB = new FakeOpenAI(['BAAI/bge-m3']);
  const ollamaModel = uniq('nomic-embed-text');
  const vllmModel = uniq('bge-m3');

  beforeAll(async () => {
    for (const runtime of [ollama, vllmA, vllmB]) {
      runtime.embedDimensions = DIMENSIONS;
      await runtime.start();
    }
    [api, dispatcher] = await Promise.all([startApi({ EMBED_BATCH_MAX: String(BATCH) }), startDispatcher()]);
    for (const id of [ollamaModel, vllmModel]) {
      await db().model.create({ data: { id, network: true, kind: 'embedding' } });
    }
    tenant = await createTenant([ollamaModel, vllmModel]);
    const on = async (backend: 'ollama' | 'openai', upstream: string, model: string) => {
      const { token } = await createDevice();
      devices.push(await startRuntimeDevice(dispatcher, token, { backend, upstream, models: [model] }));
    };
    await on('ollama', ollama.url, `${ollamaModel}=nomic-embed-text`);
    await on('openai', vllmA.baseUrl, `${vllmModel}=BAAI/bge-m3`);
    await on('openai', vllmB.baseUrl, `${vllmModel}=BAAI/bge-m3`);
  });

  afterAll(async () => {
    await Promise.all([...devices.map((d) => d.stop()), api?.stop(), dispatcher?.stop()]);
    await Promise.all([ollama.stop(), vllmA.stop(), vllmB.stop()]);
    await closeDb();
  });

  it('the openai SDK: float and base64 (its default), text and token ids, with the runtime asked for base64 (floats where it refuses it)', async () => {
    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    const input = ['The food was delicious', 'the waiter friendly'];
    const floats = await client.embeddings.create({ model: vllmModel, input, encoding_format: 'float' });
    expect(floats.data.map((d) => f32(d.embedding))).toEqual(input.map((t) => fake(t)));
    expect(floats.usage).toEqual({ prompt_tokens: 7, total_tokens: 7 });
    const asked = [vllmA, vllmB].flatMap((r) => r.embeds()).at(-1)!.body as Record<string, unknown>;
    expect(asked).toMatchObject({ model: 'BAAI/bge-m3', input, encoding_format: 'base64' });
    const decoded = await client.embeddings.create({ model: vllmModel, input });
    expect(decoded.data.map((d) => f32(d.embedding))).toEqual(input.map((t) => fake(t)));
    const tokens = await client.embeddings.create({ model: vllmModel, input: [[1, 2, 3], [4]] });
    expect(tokens.data.map((d) => f32(d.embedding))).toEqual([fake([1, 2, 3]), fake([4])]);
    expect(tokens.usage.prompt_tokens).toBe(4);
    // A runtime that refuses base64 is asked again for floats (and from then on): the client sees nothing of it.
    vllmA.embedRefusesBase64 = vllmB.embedRefusesBase64 = true;
    try {
      const retried = await client.embeddings.create({ model: vllmModel, input: ['refused once'] });
      expect(f32(retried.data[0].embedding)).toEqual(fake('refused once'));
      // Both requests went to the one runtime that served it.
      const asks = [vllmA, vllmB]
        .flatMap((r) => r.embeds())
        .map((r) => r.body as { input: string[]; encoding_format: string })
        .filter((body) => body.input[0] === 'refused once');
      expect(asks.map((body) => body.encoding_format)).toEqual(['base64', 'float']);
    } finally {
      vllmA.embedRefusesBase64 = vllmB.embedRefusesBase64 = false;
    }
  });

  it("LangChain's OpenAIEmbeddings and the Vercel AI SDK's embedMany, over more inputs than a batch", async () => {
    const texts = Array.from({ length: BATCH * 3 + 1 }, (_, i) => `document ${i} about ${'things '.repeat(i % 4)}`);
    const langchain = new OpenAIEmbeddings({
      model: vllmModel,
      apiKey: tenant.key,
      configuration: { baseURL: `${api.url}/v1` },
      maxRetries: 0,
    });
    const documents = await langchain.embedDocuments(texts);
    expect(documents.map(f32)).toEqual(texts.map((t) => fake(t)));
    expect(f32(await langchain.embedQuery('a question'))).toEqual(fake('a question'));
    const provider = createOpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1` });
    const { embeddings, usage } = await embedMany({
      model: provider.embedding(vllmModel),
      values: texts,
      maxRetries: 0,
    });
    expect(embeddings.map(f32)).toEqual(texts.map((t) => fake(t)));
    expect(usage.tokens).toBeGreaterThan(0);
  });

  it("the ollama client's embed and embeddings, and LangChain's OllamaEmbeddings, on the Ollama backend", async () => {
    const client = new Ollama({ host: api.url, headers: { authorization: `Bearer ${tenant.key}` } });
    const embedded = await client.embed({ model: ollamaModel, input: ['why is the sky blue', 'because'] });
    expect(embedded.model).toBe(ollamaModel);
    expect(embedded.embeddings.map(f32)).toEqual([fake('why is the sky blue'), fake('because')]);
    expect(embedded.prompt_eval_count).toBe(6);
    expect(ollama.lastEmbed().body).toMatchObject({
      model: 'nomic-embed-text',
      input: ['why is the sky blue', 'because'],
    });
    const legacy = await client.embeddings({ model: ollamaModel, prompt: 'because' });
    expect(f32(legacy.embedding)).toEqual(fake('because'));
    const langchain = new OllamaEmbeddings({
      model: ollamaModel,
      baseUrl: api.url,
      headers: { authorization: `Bearer ${tenant.key}` },
    });
    expect((await langchain.embedDocuments(['one', 'two'])).map(f32)).toEqual([fake('one'), fake('two')]);
  });

  it('token ids to a device whose runtime cannot take them: 400 unsupported_by_node, param input', async () => {
    const res = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model: ollamaModel, input: [[1, 2, 3]] },
    });
    expectStatus(res, 400);
    expect(res.body.error).toMatchObject({ code: 'unsupported_by_node', param: 'input' });
    const shortened = await http('POST', `${api.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model: vllmModel, input: 'x', dimensions: 8 },
    });
    expectStatus(shortened, 400);
    expect(shortened.body.error).toMatchObject({ code: 'unsupported_by_node', param: 'dimensions' });
  });

  it('a batch whose runtime fails goes to another device: the answer is whole, the record shows the second attempt', async () => {
    const own = await createTenant([vllmModel]);
    vllmA.embedFailures = 1_000;
    vllmA.embedDelayMsPerInput = vllmB.embedDelayMsPerInput = 5;
    const failedBefore = vllmA.embeds().length;
    try {
      const texts = Array.from({ length: BATCH * 4 }, (_, i) => `retried ${i}`);
      const res = await http('POST', `${api.url}/v1/embeddings`, {
        headers: { authorization: `Bearer ${own.key}` },
        body: { model: vllmModel, input: texts, encoding_format: 'float' },
      });
      expectStatus(res, 200);
      expect(res.body.data.map((d: { embedding: number[] }) => f32(d.embedding))).toEqual(texts.map((t) => fake(t)));
      // Both devices were idle when the four batches came: the failing one took at least one.
      expect(vllmA.embeds().length).toBeGreaterThan(failedBefore);
      await recordsWritten();
      const tasks = await db().task.findMany({ where: { orgId: own.org.id } });
      expect(tasks).toHaveLength(4);
      expect(tasks.every((t) => t.status === 'completed')).toBe(true);
      expect(Math.max(...tasks.map((t) => t.attempts))).toBe(2);
    } finally {
      vllmA.embedFailures = 0;
      vllmA.embedDelayMsPerInput = vllmB.embedDelayMsPerInput = 0;
    }
  });

  it('an input over the model context is refused as the runtime refuses it, and not retried', async () => {
    vllmA.embedContextTokens = vllmB.embedContextTokens = 4;
    try {
      const res = await http('POST', `${api.url}/v1/embeddings`, {
        headers: { authorization: `Bearer ${tenant.key}` },
        body: { model: vllmModel, input: 'one two three four five six' },
      });
      expectStatus(res, 400);
      expect(res.body.error.code).toBe('context_length_exceeded');
    } finally {
      vllmA.embedContextTokens = vllmB.embedContextTokens = 8192;
    }
  });
});
