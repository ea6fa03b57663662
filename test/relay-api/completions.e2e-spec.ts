import type OpenAI from 'openai';
import { createDevice, createTenant, db, uniq } from '../support/stack';
import { postSse } from '../support/sse';
import type { Tenant } from '../support/stack';
import {
  COMPLETION_ID,
  MESSAGES,
  PROMPT_WORDS,
  Relay,
  TASK_ADDRESS,
  assertChoiceFraming,
  assertChunkEnvelope,
  chunksOf,
  completedTask,
  finishReasons,
  streamedContent,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * POST /v1/chat/completions, the happy paths: non-streamed and streamed answers through the official
 * openai client (v6) and raw HTTP, usage, and finish_reason `length` from max_tokens,
 * max_completion_tokens and the model's max output tokens.
 */
describe('chat completions: responses, streaming and length', () => {
  const relay = new Relay();
  let tenant: Tenant;
  let client: OpenAI;
  let deviceId: string;
  let clampedDeviceId: string;
  /** Length of the sim's natural reply, in tokens (words). */
  const TOKENS = 12;
  const model = uniq('model');
  /** A model whose catalog entry caps the output at CLAMP tokens. */
  const clampedModel = uniq('model');
  const CLAMP = 4;

  beforeAll(async () => {
    await relay.start();
    tenant = await createTenant([model, clampedModel]);
    await db().model.update({ where: { id: clampedModel }, data: { maxOutputTokens: CLAMP } });
    const [device, clampedDevice] = await Promise.all([createDevice(), createDevice()]);
    deviceId = device.id;
    clampedDeviceId = clampedDevice.id;
    await relay.deviceSet([
      { token: device.token, opts: { models: [model], tokens: TOKENS } },
      { token: clampedDevice.token, opts: { models: [clampedModel], tokens: TOKENS } },
    ]);
    client = relay.client(tenant.key);
  });

  afterAll(() => relay.stop());

  const words = (text: string) => text.split(' ');

  test('a non-streamed completion through the openai client has OpenAI’s shape plus mode and task_address', async () => {
    const { data: completion, response } = await client.chat.completions
      .create({ model, messages: [...MESSAGES] })
      .withResponse();
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type') ?? '').toMatch(/^application\/json/);
    expect(response.headers.get('x-switchyard-ignored-params')).toBeNull();

    expect(completion.id).toMatch(COMPLETION_ID);
    expect(completion.object).toBe('chat.completion');
    expect(Number.isInteger(completion.created)).toBe(true);
    expect({
      ok: Math.abs(completion.created - Date.now() / 1000) < 600,
      message: `created ${completion.created}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    expect(completion.model).toBe(model);
    expect(completion.system_fingerprint).toBe('fp_switchyard');
    expect(completion.choices).toHaveLength(1);
    const [choice] = completion.choices;
    expect(choice.index).toBe(0);
    expect(choice.finish_reason).toBe('stop');
    expect(choice.logprobs).toBeNull();
    expect(Object.keys(choice.message).sort()).toEqual(['content', 'refusal', 'role']);
    expect(choice.message.role).toBe('assistant');
    expect(choice.message.refusal).toBeNull();
    expect(typeof choice.message.content).toBe('string');
    expect(words(choice.message.content!)).toHaveLength(TOKENS);
    expect(completion.usage).toEqual({
      prompt_tokens: PROMPT_WORDS,
      completion_tokens: TOKENS,
      total_tokens: PROMPT_WORDS + TOKENS,
    });
    const extra = completion as unknown as { mode: string; task_address: string };
    expect(extra.mode).toBe('network');
    expect(extra.task_address).toMatch(TASK_ADDRESS);
    expect(extra.task_address.startsWith('network:')).toBe(true);

    const task = await completedTask(extra.task_address);
    expect(task.id).toBe(extra.task_address.slice('network:'.length));
    expect(task.orgId).toBe(tenant.org.id);
    expect(task.apiKeyId).toBe(tenant.keyId);
    expect(task.modelId).toBe(model);
    expect(task.mode).toBe('network');
    expect(task.deviceId).toBe(deviceId);
    expect(task.api).toBe('openai');
    expect(task.stream).toBe(false);
    expect(task.finishReason).toBe('stop');
    expect(task.errorCode).toBeNull();
    expect(task.promptTokens).toBe(PROMPT_WORDS);
    expect(task.completionTokens).toBe(TOKENS);
  });

  test('the same request over raw HTTP: exact top-level fields, same content, new id and task', async () => {
    const viaClient = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES });
    expectStatus(res, 200);
    expect(res.headers.get('content-type') ?? '').toMatch(/^application\/json/);
    expect(Object.keys(res.body).sort()).toEqual([
      'choices',
      'created',
      'id',
      'mode',
      'model',
      'object',
      'system_fingerprint',
      'task_address',
      'usage',
    ]);
    expect(res.body.id).toMatch(COMPLETION_ID);
    expect(res.body.id).not.toBe(viaClient.id);
    expect(res.body.object).toBe('chat.completion');
    expect(res.body.model).toBe(model);
    expect(res.body.system_fingerprint).toBe('fp_switchyard');
    expect(res.body.mode).toBe('network');
    expect(res.body.task_address).toMatch(TASK_ADDRESS);
    expect(res.body.task_address).not.toBe((viaClient as any).task_address);
    expect(res.body.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', content: viaClient.choices[0].message.content, refusal: null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ]);
    expect(res.body.usage).toEqual(viaClient.usage);
  });

  test('the content is deterministic: the same request gets the same reply, another prompt another', async () => {
    const ask = (content: string) =>
      client.chat.completions.create({ model, messages: [{ role: 'user', content }] }).then((c) => c.choices[0]);
    const [a, b, other] = await Promise.all([
      ask('Which track goes north?'),
      ask('Which track goes north?'),
      ask('Which track goes south?'),
    ]);
    expect(a.message.content).toBe(b.message.content);
    expect(a.message.content).not.toBe(other.message.content);
  });

  test('streamed over raw HTTP: SSE framing, role chunk, content chunks, finish chunk, [DONE]', async () => {
    const plain = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true });
    const chunks = chunksOf(sse);
    const envelope = assertChunkEnvelope(chunks, model);
    expect(envelope.mode).toBe('network');
    expect(chunks[0].system_fingerprint).toBe('fp_switchyard');
    expect(envelope.id).not.toBe(plain.id);
    assertChoiceFraming(chunks, 1);
    // Every content chunk carries text, with finish_reason null.
    const contentChunks = chunks.slice(1, -1);
    expect(contentChunks).toHaveLength(TOKENS);
    for (const chunk of contentChunks) {
      expect(chunk.choices).toHaveLength(1);
      expect(typeof chunk.choices[0].delta.content).toBe('string');
      expect(chunk.choices[0].finish_reason).toBeNull();
    }
    const last = chunks.at(-1);
    expect(last.choices).toHaveLength(1);
    expect(last.choices[0].finish_reason).toBe('stop');
    expect(last.choices[0].delta.content ?? '').toBe('');
    expect(streamedContent(chunks)).toEqual([plain.choices[0].message.content]);
    // Without stream_options.include_usage no chunk carries usage.
    expect(chunks.every((c) => c.usage === undefined || c.usage === null)).toBe(true);

    const task = await completedTask(envelope.task_address);
    expect(task.stream).toBe(true);
    expect(task.api).toBe('openai');
    expect(task.deviceId).toBe(deviceId);
    expect(task.finishReason).toBe('stop');
    expect(task.completionTokens).toBe(TOKENS);
  });

  test('streamed through the openai client: the same content, every chunk with mode and task_address', async () => {
    const plain = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const stream = await client.chat.completions.create({ model, messages: [...MESSAGES], stream: true });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
    }
    const envelope = assertChunkEnvelope(chunks, model);
    expect(envelope.task_address).toMatch(/^network:/);
    assertChoiceFraming(chunks, 1);
    expect(finishReasons(chunks)[0].reason).toBe('stop');
    expect(finishReasons(chunks)[0].at).toBe(chunks.length - 1);
    expect(streamedContent(chunks)).toEqual([plain.choices[0].message.content]);
    await completedTask(envelope.task_address);
  });

  test('stream_options.include_usage: a last chunk with choices [] and usage, usage null on every other', async () => {
    const sse = await postSse(relay.url, tenant.key, {
      model,
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = chunksOf(sse);
    assertChunkEnvelope(chunks, model);
    const usageChunk = chunks.at(-1);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toEqual({
      prompt_tokens: PROMPT_WORDS,
      completion_tokens: TOKENS,
      total_tokens: PROMPT_WORDS + TOKENS,
    });
    const rest = chunks.slice(0, -1);
    for (const chunk of rest) {
      expect({ ok: 'usage' in chunk, message: `chunk without a usage key: ${JSON.stringify(chunk)}` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      expect(chunk.usage).toBeNull();
    }
    assertChoiceFraming(rest, 1);
    expect(rest.at(-1).choices[0].finish_reason).toBe('stop');

    // The same through the SDK.
    const stream = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      stream: true,
      stream_options: { include_usage: true },
    });
    const sdkChunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      sdkChunks.push(chunk);
    }
    const sdkLast = sdkChunks.at(-1)!;
    expect(sdkLast.choices).toEqual([]);
    expect(sdkLast.usage).toEqual(usageChunk.usage);
    expect(sdkChunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    expect(streamedContent(sdkChunks)).toEqual(streamedContent(chunks));
  });

  test('max_tokens below the reply length: finish_reason length, completion_tokens = the limit', async () => {
    const full = (await client.chat.completions.create({ model, messages: [...MESSAGES] })).choices[0].message.content!;
    const cut = await client.chat.completions.create({ model, messages: [...MESSAGES], max_tokens: 5 });
    expect(cut.choices[0].finish_reason).toBe('length');
    expect(cut.usage?.completion_tokens).toBe(5);
    expect(cut.usage?.total_tokens).toBe(PROMPT_WORDS + 5);
    expect(cut.choices[0].message.content).toBe(words(full).slice(0, 5).join(' '));
    const task = await completedTask((cut as any).task_address);
    expect(task.finishReason).toBe('length');
    expect(task.completionTokens).toBe(5);

    // Streamed: 5 content chunks, then finish_reason length.
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, max_tokens: 5 });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    expect(chunks).toHaveLength(1 + 5 + 1);
    expect(chunks.at(-1).choices[0].finish_reason).toBe('length');
    expect(streamedContent(chunks)).toEqual([cut.choices[0].message.content]);

    // A limit the reply fits in exactly is not cut: finish_reason stop.
    const exact = await client.chat.completions.create({ model, messages: [...MESSAGES], max_tokens: TOKENS });
    expect(exact.choices[0].finish_reason).toBe('stop');
    expect(exact.choices[0].message.content).toBe(full);
  });

  test('max_completion_tokens wins over max_tokens', async () => {
    const both = await relay.chat(tenant.key, { model, messages: MESSAGES, max_tokens: 7, max_completion_tokens: 3 });
    expectStatus(both, 200);
    expect(both.body.choices[0].finish_reason).toBe('length');
    expect(both.body.usage.completion_tokens).toBe(3);
    expect(words(both.body.choices[0].message.content)).toHaveLength(3);

    // Also when max_completion_tokens is the larger one.
    const larger = await relay.chat(tenant.key, { model, messages: MESSAGES, max_tokens: 2, max_completion_tokens: 6 });
    expectStatus(larger, 200);
    expect(larger.body.choices[0].finish_reason).toBe('length');
    expect(larger.body.usage.completion_tokens).toBe(6);

    const alone = await client.chat.completions.create({ model, messages: [...MESSAGES], max_completion_tokens: 4 });
    expect(alone.choices[0].finish_reason).toBe('length');
    expect(alone.usage?.completion_tokens).toBe(4);
  });

  test('a model’s max output tokens clamps a larger max_tokens and the default', async () => {
    const larger = await client.chat.completions.create({
      model: clampedModel,
      messages: [...MESSAGES],
      max_tokens: 10,
    });
    expect(larger.choices[0].finish_reason).toBe('length');
    expect(larger.usage?.completion_tokens).toBe(CLAMP);
    expect(words(larger.choices[0].message.content!)).toHaveLength(CLAMP);
    const task = await completedTask((larger as any).task_address);
    expect(task.deviceId).toBe(clampedDeviceId);
    expect(task.completionTokens).toBe(CLAMP);
    expect(task.finishReason).toBe('length');

    // Without any limit the default (512) is clamped too.
    const byDefault = await client.chat.completions.create({ model: clampedModel, messages: [...MESSAGES] });
    expect(byDefault.choices[0].finish_reason).toBe('length');
    expect(byDefault.usage?.completion_tokens).toBe(CLAMP);

    // max_completion_tokens is clamped the same way; a smaller limit is kept.
    const completionLimit = await relay.chat(tenant.key, {
      model: clampedModel,
      messages: MESSAGES,
      max_completion_tokens: 50,
    });
    expectStatus(completionLimit, 200);
    expect(completionLimit.body.usage.completion_tokens).toBe(CLAMP);
    const smaller = await client.chat.completions.create({
      model: clampedModel,
      messages: [...MESSAGES],
      max_tokens: 2,
    });
    expect(smaller.usage?.completion_tokens).toBe(2);
    expect(smaller.choices[0].finish_reason).toBe('length');
  });
});
