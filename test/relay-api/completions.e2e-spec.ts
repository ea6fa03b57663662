import assert from 'node:assert/strict';
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
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(response.headers.get('x-switchyard-ignored-params'), null);

    assert.match(completion.id, COMPLETION_ID);
    assert.equal(completion.object, 'chat.completion');
    assert.ok(Number.isInteger(completion.created));
    assert.ok(Math.abs(completion.created - Date.now() / 1000) < 600, `created ${completion.created}`);
    assert.equal(completion.model, model);
    assert.equal(completion.system_fingerprint, 'fp_switchyard');
    assert.equal(completion.choices.length, 1);
    const [choice] = completion.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.finish_reason, 'stop');
    assert.equal(choice.logprobs, null);
    expect(Object.keys(choice.message).sort()).toEqual(['content', 'refusal', 'role']);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.refusal, null);
    assert.equal(typeof choice.message.content, 'string');
    assert.equal(words(choice.message.content!).length, TOKENS);
    expect(completion.usage).toEqual({
      prompt_tokens: PROMPT_WORDS,
      completion_tokens: TOKENS,
      total_tokens: PROMPT_WORDS + TOKENS,
    });
    const extra = completion as unknown as { mode: string; task_address: string };
    assert.equal(extra.mode, 'network');
    assert.match(extra.task_address, TASK_ADDRESS);
    assert.ok(extra.task_address.startsWith('network:'));

    const task = await completedTask(extra.task_address);
    assert.equal(task.id, extra.task_address.slice('network:'.length));
    assert.equal(task.orgId, tenant.org.id);
    assert.equal(task.apiKeyId, tenant.keyId);
    assert.equal(task.modelId, model);
    assert.equal(task.mode, 'network');
    assert.equal(task.deviceId, deviceId);
    assert.equal(task.api, 'openai');
    assert.equal(task.stream, false);
    assert.equal(task.finishReason, 'stop');
    assert.equal(task.errorCode, null);
    assert.equal(task.promptTokens, PROMPT_WORDS);
    assert.equal(task.completionTokens, TOKENS);
  });

  test('the same request over raw HTTP: exact top-level fields, same content, new id and task', async () => {
    const viaClient = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES });
    assert.equal(res.status, 200, res.text);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
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
    assert.match(res.body.id, COMPLETION_ID);
    assert.notEqual(res.body.id, viaClient.id);
    assert.equal(res.body.object, 'chat.completion');
    assert.equal(res.body.model, model);
    assert.equal(res.body.system_fingerprint, 'fp_switchyard');
    assert.equal(res.body.mode, 'network');
    assert.match(res.body.task_address, TASK_ADDRESS);
    assert.notEqual(res.body.task_address, (viaClient as any).task_address);
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
    assert.equal(a.message.content, b.message.content);
    assert.notEqual(a.message.content, other.message.content);
  });

  test('streamed over raw HTTP: SSE framing, role chunk, content chunks, finish chunk, [DONE]', async () => {
    const plain = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true });
    const chunks = chunksOf(sse);
    const envelope = assertChunkEnvelope(chunks, model);
    assert.equal(envelope.mode, 'network');
    assert.equal(chunks[0].system_fingerprint, 'fp_switchyard');
    assert.notEqual(envelope.id, plain.id);
    assertChoiceFraming(chunks, 1);
    // Every content chunk carries text, with finish_reason null.
    const contentChunks = chunks.slice(1, -1);
    assert.equal(contentChunks.length, TOKENS);
    for (const chunk of contentChunks) {
      assert.equal(chunk.choices.length, 1);
      assert.equal(typeof chunk.choices[0].delta.content, 'string');
      assert.equal(chunk.choices[0].finish_reason, null);
    }
    const last = chunks.at(-1);
    assert.equal(last.choices.length, 1);
    assert.equal(last.choices[0].finish_reason, 'stop');
    assert.equal(last.choices[0].delta.content ?? '', '');
    expect(streamedContent(chunks)).toEqual([plain.choices[0].message.content]);
    // Without stream_options.include_usage no chunk carries usage.
    assert.ok(chunks.every((c) => c.usage === undefined || c.usage === null));

    const task = await completedTask(envelope.task_address);
    assert.equal(task.stream, true);
    assert.equal(task.api, 'openai');
    assert.equal(task.deviceId, deviceId);
    assert.equal(task.finishReason, 'stop');
    assert.equal(task.completionTokens, TOKENS);
  });

  test('streamed through the openai client: the same content, every chunk with mode and task_address', async () => {
    const plain = await client.chat.completions.create({ model, messages: [...MESSAGES] });
    const stream = await client.chat.completions.create({ model, messages: [...MESSAGES], stream: true });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
    }
    const envelope = assertChunkEnvelope(chunks, model);
    assert.match(envelope.task_address, /^network:/);
    assertChoiceFraming(chunks, 1);
    assert.equal(finishReasons(chunks)[0].reason, 'stop');
    assert.equal(finishReasons(chunks)[0].at, chunks.length - 1);
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
      assert.ok('usage' in chunk, `chunk without a usage key: ${JSON.stringify(chunk)}`);
      assert.equal(chunk.usage, null);
    }
    assertChoiceFraming(rest, 1);
    assert.equal(rest.at(-1).choices[0].finish_reason, 'stop');

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
    assert.ok(sdkChunks.slice(0, -1).every((c) => c.usage === null));
    expect(streamedContent(sdkChunks)).toEqual(streamedContent(chunks));
  });

  test('max_tokens below the reply length: finish_reason length, completion_tokens = the limit', async () => {
    const full = (await client.chat.completions.create({ model, messages: [...MESSAGES] })).choices[0].message.content!;
    const cut = await client.chat.completions.create({ model, messages: [...MESSAGES], max_tokens: 5 });
    assert.equal(cut.choices[0].finish_reason, 'length');
    assert.equal(cut.usage?.completion_tokens, 5);
    assert.equal(cut.usage?.total_tokens, PROMPT_WORDS + 5);
    assert.equal(cut.choices[0].message.content, words(full).slice(0, 5).join(' '));
    const task = await completedTask((cut as any).task_address);
    assert.equal(task.finishReason, 'length');
    assert.equal(task.completionTokens, 5);

    // Streamed: 5 content chunks, then finish_reason length.
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, max_tokens: 5 });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    assert.equal(chunks.length, 1 + 5 + 1);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
    expect(streamedContent(chunks)).toEqual([cut.choices[0].message.content]);

    // A limit the reply fits in exactly is not cut: finish_reason stop.
    const exact = await client.chat.completions.create({ model, messages: [...MESSAGES], max_tokens: TOKENS });
    assert.equal(exact.choices[0].finish_reason, 'stop');
    assert.equal(exact.choices[0].message.content, full);
  });

  test('max_completion_tokens wins over max_tokens', async () => {
    const both = await relay.chat(tenant.key, { model, messages: MESSAGES, max_tokens: 7, max_completion_tokens: 3 });
    assert.equal(both.status, 200, both.text);
    assert.equal(both.body.choices[0].finish_reason, 'length');
    assert.equal(both.body.usage.completion_tokens, 3);
    assert.equal(words(both.body.choices[0].message.content).length, 3);

    // Also when max_completion_tokens is the larger one.
    const larger = await relay.chat(tenant.key, { model, messages: MESSAGES, max_tokens: 2, max_completion_tokens: 6 });
    assert.equal(larger.status, 200, larger.text);
    assert.equal(larger.body.choices[0].finish_reason, 'length');
    assert.equal(larger.body.usage.completion_tokens, 6);

    const alone = await client.chat.completions.create({ model, messages: [...MESSAGES], max_completion_tokens: 4 });
    assert.equal(alone.choices[0].finish_reason, 'length');
    assert.equal(alone.usage?.completion_tokens, 4);
  });

  test('a model’s max output tokens clamps a larger max_tokens and the default', async () => {
    const larger = await client.chat.completions.create({
      model: clampedModel,
      messages: [...MESSAGES],
      max_tokens: 10,
    });
    assert.equal(larger.choices[0].finish_reason, 'length');
    assert.equal(larger.usage?.completion_tokens, CLAMP);
    assert.equal(words(larger.choices[0].message.content!).length, CLAMP);
    const task = await completedTask((larger as any).task_address);
    assert.equal(task.deviceId, clampedDeviceId);
    assert.equal(task.completionTokens, CLAMP);
    assert.equal(task.finishReason, 'length');

    // Without any limit the default (512) is clamped too.
    const byDefault = await client.chat.completions.create({ model: clampedModel, messages: [...MESSAGES] });
    assert.equal(byDefault.choices[0].finish_reason, 'length');
    assert.equal(byDefault.usage?.completion_tokens, CLAMP);

    // max_completion_tokens is clamped the same way; a smaller limit is kept.
    const completionLimit = await relay.chat(tenant.key, {
      model: clampedModel,
      messages: MESSAGES,
      max_completion_tokens: 50,
    });
    assert.equal(completionLimit.status, 200, completionLimit.text);
    assert.equal(completionLimit.body.usage.completion_tokens, CLAMP);
    const smaller = await client.chat.completions.create({
      model: clampedModel,
      messages: [...MESSAGES],
      max_tokens: 2,
    });
    assert.equal(smaller.usage?.completion_tokens, 2);
    assert.equal(smaller.choices[0].finish_reason, 'length');
  });
});
