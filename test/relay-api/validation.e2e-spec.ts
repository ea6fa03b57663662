import OpenAI from 'openai';
import { createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import { MESSAGES, Relay, assertError, bearer, completedTask, startApi, taskCount } from './helpers';
import { expectStatus } from '../support/expect-status';
import { eventually } from '../admin/helpers';

/**
 * POST /v1/chat/completions, what the api refuses, ignores or accepts before anything is queued:
 * rejected fields, ignored fields and their header, null as not sent, ranges, content parts,
 * message roles, model access, a model of another kind. Every 4xx leaves no task row behind.
 */
describe('chat completions: validation, ignored and rejected fields', () => {
  const relay = new Relay();
  let tenant: Tenant;
  let other: Tenant;
  const model = uniq('model');
  /** Enabled for another org only, with a device online: it must not exist for `tenant`. */
  const foreignModel = uniq('model');
  /** An embedding model enabled for `tenant`, with a device online for it: not for the chat routes. */
  const embeddingModel = `${uniq('embed')}:335m`;
  let baseline: string;

  beforeAll(async () => {
    await relay.start();
    await db().model.create({ data: { id: embeddingModel, kind: 'embedding', network: true } });
    [tenant, other] = await Promise.all([createTenant([model, embeddingModel]), createTenant([foreignModel])]);
    const device = await createDevice();
    await relay.device(device.token, { models: [model, foreignModel, embeddingModel], tokens: 10 });
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES });
    expectStatus(res, 200);
    baseline = res.body.choices[0].message.content;
  });

  afterAll(() => relay.stop());

  /** Sends the body and asserts the 4xx, and that the org has no new task row. */
  async function rejects(body: unknown, status: number, code: string | null, param?: string | null) {
    const before = await taskCount(tenant.org.id);
    const res = await relay.chat(tenant.key, body);
    const error = assertError(res, status, code, param);
    expect(res.headers.get('x-switchyard-ignored-params')).toBeNull();
    expect({
      actual: await taskCount(tenant.org.id),
      message: `a task row was written for ${JSON.stringify(body)}`,
    }).toEqual(expect.objectContaining({ actual: before }));
    return error;
  }

  const ok = async (body: Record<string, unknown>) => {
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES, ...body });
    expect({ status: res.status, message: `${JSON.stringify(body)}: ${res.text}` }).toEqual(
      expect.objectContaining({ status: 200 }),
    );
    return res;
  };

  test('every rejected field is 400 unsupported_parameter naming it', async () => {
    const rejected: Record<string, unknown> = {
      prediction: { type: 'content', content: 'The rail yard is' },
      parallel_tool_calls: false,
      verbosity: 'low',
      moderation: true,
      modalities: ['text'],
      audio: { voice: 'alloy', format: 'mp3' },
    };
    for (const [param, value] of Object.entries(rejected)) {
      const error = await rejects({ model, messages: MESSAGES, [param]: value }, 400, 'unsupported_parameter', param);
      expect({ ok: error.message.includes(param), message: error.message }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      // Streamed requests are refused the same way, as JSON before any event.
      const before = await taskCount(tenant.org.id);
      const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, [param]: value });
      expectStatus(sse, 400);
      expect(JSON.parse(sse.text).error.code).toBe('unsupported_parameter');
      expect(JSON.parse(sse.text).error.param).toBe(param);
      expect(await taskCount(tenant.org.id)).toBe(before);
    }
  });

  test('the openai client surfaces a rejected field as a BadRequestError with code and param', async () => {
    const client = relay.client(tenant.key);
    const before = await taskCount(tenant.org.id);
    const refused = client.chat.completions.create({ model, messages: [...MESSAGES], modalities: ['text'] });
    await expect(refused).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(refused).rejects.toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'modalities' });
    expect(await taskCount(tenant.org.id)).toBe(before);
  });

  test('n: 1 and parallel_tool_calls: true are fine', async () => {
    const n = await ok({ n: 1 });
    expect(n.body.choices).toHaveLength(1);
    expect(n.body.choices[0].message.content).toBe(baseline);
    const parallel = await ok({ parallel_tool_calls: true });
    expect(parallel.body.choices[0].message.content).toBe(baseline);
    expect(parallel.headers.get('x-switchyard-ignored-params')).toBeNull();
  });

  test('tool_choice required or a named function is 400 unsupported_parameter param tool_choice', async () => {
    const tools = [{ type: 'function', function: { name: 'get_time' } }];
    await rejects(
      { model, messages: MESSAGES, tools, tool_choice: 'required' },
      400,
      'unsupported_parameter',
      'tool_choice',
    );
    await rejects(
      { model, messages: MESSAGES, tools, tool_choice: { type: 'function', function: { name: 'get_time' } } },
      400,
      'unsupported_parameter',
      'tool_choice',
    );
    const none = await ok({ tools, tool_choice: 'none' });
    expect(none.body.choices[0].finish_reason).toBe('stop');
    const auto = await ok({ tools, tool_choice: 'auto' });
    expect(auto.body.choices[0].finish_reason).toBe('tool_calls');
  });

  test('ignored fields are accepted and listed, exactly, in x-switchyard-ignored-params', async () => {
    const ignored: Record<string, unknown> = {
      seed: 42,
      user: 'user-1234',
      safety_identifier: 'sid-1234',
      store: true,
      metadata: { team: 'rail' },
      service_tier: 'auto',
      prompt_cache_key: 'cache-1',
      prompt_cache_retention: '24h',
      prompt_cache_options: { ttl: 60 },
      frobnicate_level: 11,
    };
    const before = await taskCount(tenant.org.id);
    const res = await ok(ignored);
    const header = res.headers.get('x-switchyard-ignored-params');
    if (!header) {
      throw new Error('no x-switchyard-ignored-params header');
    }
    const listed = header.split(',');
    expect([...listed].sort()).toEqual(Object.keys(ignored).sort());
    expect(new Set(listed).size).toBe(listed.length);
    // They have no effect.
    expect(res.body.choices[0].message.content).toBe(baseline);
    expect(await taskCount(tenant.org.id)).toBe(before + 1);

    // One at a time: the header names just that one.
    for (const [field, value] of Object.entries(ignored)) {
      const one = await ok({ [field]: value });
      expect(one.headers.get('x-switchyard-ignored-params')).toBe(field);
    }

    // Streamed answers carry the header too.
    const sse = await postSse(relay.url, tenant.key, {
      model,
      messages: MESSAGES,
      stream: true,
      seed: 7,
      unknown_thing: 'x',
    });
    expectStatus(sse, 200);
    expect(sse.headers.get('x-switchyard-ignored-params')?.split(',').sort()).toEqual(['seed', 'unknown_thing']);

    // And through the SDK.
    const client = relay.client(tenant.key);
    const { response } = await client.chat.completions
      .create({ model, messages: [...MESSAGES], seed: 1, user: 'u' })
      .withResponse();
    expect(response.headers.get('x-switchyard-ignored-params')?.split(',').sort()).toEqual(['seed', 'user']);

    // No ignored field, no header.
    const none = await ok({});
    expect(none.headers.get('x-switchyard-ignored-params')).toBeNull();
  });

  test('null counts as not sent', async () => {
    const res = await ok({
      temperature: null,
      top_p: null,
      stop: null,
      max_tokens: null,
      max_completion_tokens: null,
      frequency_penalty: null,
      presence_penalty: null,
      n: null,
      stream: null,
      stream_options: null,
      mode: null,
      tools: null,
      tool_choice: null,
      response_format: null,
      logprobs: null,
      top_logprobs: null,
      logit_bias: null,
      reasoning_effort: null,
      // Ignored and rejected fields sent as null are neither listed nor refused.
      seed: null,
      user: null,
      metadata: null,
      some_unknown_field: null,
      prediction: null,
      audio: null,
      modalities: null,
      parallel_tool_calls: null,
    });
    expect(res.headers.get('x-switchyard-ignored-params')).toBeNull();
    expect(res.headers.get('content-type') ?? '').toMatch(/^application\/json/);
    expect(res.body.choices[0].message.content).toBe(baseline);
    expect(res.body.choices[0].finish_reason).toBe('stop');
    expect(res.body.mode).toBe('network');

    // Inside messages too: a null name or tool_calls is not sent.
    const inMessages = await ok({
      messages: [
        { role: 'system', content: 'You are terse.', name: null },
        { role: 'assistant', content: 'Ready.', tool_calls: null, function_call: null, refusal: null },
        { role: 'user', content: 'Tell me about the rail yard.', name: null },
      ],
    });
    expect(inMessages.headers.get('x-switchyard-ignored-params')).toBeNull();
    expect(inMessages.body.choices[0].finish_reason).toBe('stop');
  });

  test('values out of range are 400 naming the param', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ temperature: 2.5 }, 'temperature'],
      [{ temperature: -0.1 }, 'temperature'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ top_p: -1 }, 'top_p'],
      [{ frequency_penalty: 3 }, 'frequency_penalty'],
      [{ presence_penalty: -3 }, 'presence_penalty'],
      [{ max_tokens: 0 }, 'max_tokens'],
      [{ max_tokens: 2.5 }, 'max_tokens'],
      [{ max_completion_tokens: 0 }, 'max_completion_tokens'],
      [{ n: 9 }, 'n'],
      [{ n: 0 }, 'n'],
      [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: -1 }, 'top_logprobs'],
      [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      [{ mode: 'everywhere' }, 'mode'],
      [{ reasoning_effort: 'extreme' }, 'reasoning_effort'],
      [{ temperature: 'hot' }, 'temperature'],
    ];
    for (const [fields, param] of cases) {
      await rejects({ model, messages: MESSAGES, ...fields }, 400, null, param);
    }
  });

  test('boundary values are accepted', async () => {
    await ok({ temperature: 0 });
    await ok({ temperature: 2 });
    await ok({ top_p: 0 });
    await ok({ top_p: 1 });
    await ok({ frequency_penalty: -2, presence_penalty: 2 });
    await ok({ frequency_penalty: 2, presence_penalty: -2 });
    const one = await ok({ max_tokens: 1 });
    expect(one.body.usage.completion_tokens).toBe(1);
    const eight = await ok({ n: 8 });
    expect(eight.body.choices).toHaveLength(8);
    await ok({ stop: ['zz1', 'zz2', 'zz3', 'zz4'] });
    await ok({ logprobs: true, top_logprobs: 0 });
    for (const mode of ['auto', 'network']) {
      const res = await ok({ mode });
      expect(res.body.mode).toBe('network');
    }
  });

  test('fields that need another: stream_options needs stream, top_logprobs needs logprobs', async () => {
    await rejects({ model, messages: MESSAGES, stream_options: { include_usage: true } }, 400, null, 'stream_options');
    await rejects(
      { model, messages: MESSAGES, stream: false, stream_options: { include_usage: true } },
      400,
      null,
      'stream_options',
    );
    await rejects({ model, messages: MESSAGES, top_logprobs: 2 }, 400, null, 'top_logprobs');
    await rejects({ model, messages: MESSAGES, logprobs: false, top_logprobs: 2 }, 400, null, 'top_logprobs');
  });

  test('model and messages: model_required, messages missing or empty', async () => {
    await rejects({ messages: MESSAGES }, 400, 'model_required', 'model');
    await rejects({ model: null, messages: MESSAGES }, 400, 'model_required', 'model');
    await rejects({ model, messages: [] }, 400, null, 'messages');
    await rejects({ model }, 400, null, 'messages');
    await rejects({ model, messages: 'hello' }, 400, null, 'messages');
  });

  test('image, audio and file content parts are 400 unsupported_content_part naming the part', async () => {
    await rejects(
      {
        model,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is in this picture?' },
              { type: 'image_url', image_url: { url: 'https://example.com/yard.png' } },
            ],
          },
        ],
      },
      400,
      'unsupported_content_part',
      'messages[0].content[1]',
    );
    await rejects(
      {
        model,
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] },
        ],
      },
      400,
      'unsupported_content_part',
      'messages[1].content[0]',
    );
    await rejects(
      {
        model,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Summarise' },
              { type: 'text', text: 'this file' },
              { type: 'file', file: { file_id: 'file-123' } },
            ],
          },
        ],
      },
      400,
      'unsupported_content_part',
      'messages[0].content[2]',
    );
  });

  test('text content parts are joined and answered like a string', async () => {
    const res = await ok({
      messages: [
        { role: 'system', content: [{ type: 'text', text: 'You are terse.' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Tell me about ' },
            { type: 'text', text: 'the rail yard.' },
          ],
        },
      ],
    });
    expect(res.body.choices[0].message.content).toBe(baseline);
  });

  test('every message role is accepted; a tool message needs tool_call_id', async () => {
    const res = await ok({
      messages: [
        { role: 'developer', content: 'Answer briefly.' },
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'What time is it?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_time', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'call_abc', content: '12:00' },
        { role: 'assistant', content: 'It is noon.' },
        { role: 'user', content: 'And the weather?' },
        { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{}' } },
        { role: 'function', name: 'get_weather', content: 'Sunny' },
      ],
    });
    expect(res.body.choices[0].finish_reason).toBe('stop');
    expect(typeof res.body.choices[0].message.content).toBe('string');

    // developer is treated as system: the same conversation as with system gets the same reply.
    const asDeveloper = await ok({
      messages: [
        { role: 'developer', content: 'You are terse.' },
        { role: 'user', content: 'Tell me about the rail yard.' },
      ],
    });
    expect(asDeveloper.body.choices[0].message.content).toBe(baseline);

    const error = await rejects(
      {
        model,
        messages: [
          { role: 'user', content: 'What time is it?' },
          { role: 'tool', content: '12:00' },
        ],
      },
      400,
      null,
    );
    expect(error.param ?? '').toMatch(/^messages\[1\]/);
    await rejects({ model, messages: [{ role: 'narrator', content: 'Once upon a time' }] }, 400, null);
  });

  test('without a model, DEFAULT_MODEL is used when configured', async () => {
    const withDefault = { api: await startApi({ DEFAULT_MODEL: model }) };
    try {
      const res = await http('POST', `${withDefault.api.url}/v1/chat/completions`, {
        body: { messages: MESSAGES },
        headers: bearer(tenant.key),
      });
      expectStatus(res, 200);
      expect(res.body.model).toBe(model);
      expect(res.body.choices[0].message.content).toBe(baseline);
      expect((await completedTask(res.body.task_address)).modelId).toBe(model);
      // The default does not open models the org does not have.
      const foreign = await http('POST', `${withDefault.api.url}/v1/chat/completions`, {
        body: { model: foreignModel, messages: MESSAGES },
        headers: bearer(tenant.key),
      });
      assertError(foreign, 404, 'model_not_found');
    } finally {
      await withDefault.api.stop();
    }
  });

  test('an unknown API key is 401 invalid_api_key, streamed or not', async () => {
    const res = await http('POST', relay.url, {
      body: { model, messages: MESSAGES },
      headers: bearer('sy_' + 'x'.repeat(40)),
    });
    assertError(res, 401, 'invalid_api_key');
    const streamed = await postSse(relay.url, 'sy_' + 'y'.repeat(40), { model, messages: MESSAGES, stream: true });
    expectStatus(streamed, 401);
    expect(JSON.parse(streamed.text).error.code).toBe('invalid_api_key');
  });

  test('a model not enabled for the org is 404 model_not_found, even with a device online for it', async () => {
    await rejects({ model: foreignModel, messages: MESSAGES }, 404, 'model_not_found');
    await rejects({ model: uniq('no-such-model'), messages: MESSAGES }, 404, 'model_not_found');
    // The org that has it enabled is served.
    const res = await relay.chat(other.key, { model: foreignModel, messages: MESSAGES });
    expectStatus(res, 200);
    expect(res.body.model).toBe(foreignModel);
    await recordsWritten();
    expect(await db().task.count({ where: { orgId: tenant.org.id, modelId: foreignModel } })).toBe(0);
  });

  test('an embedding model is 400 not_a_chat_model on every chat route, even with a device online for it', async () => {
    const message = `'${embeddingModel}' is an embedding model, not a chat model.`;
    const before = await taskCount(tenant.org.id);
    const refused = await rejects({ model: embeddingModel, messages: MESSAGES }, 400, 'not_a_chat_model', 'model');
    expect(refused.message).toBe(message);
    // Streamed, it is refused the same way, as JSON before any event.
    const sse = await postSse(relay.url, tenant.key, { model: embeddingModel, messages: MESSAGES, stream: true });
    expectStatus(sse, 400);
    expect(JSON.parse(sse.text).error).toMatchObject({ code: 'not_a_chat_model', param: 'model', message });
    for (const path of ['/openai/v1/chat/completions', '/v2/vllm/v1/chat/completions']) {
      const aliased = await http('POST', `${relay.api.url}${path}`, {
        body: { model: embeddingModel, messages: MESSAGES },
        headers: bearer(tenant.key),
      });
      expect(assertError(aliased, 400, 'not_a_chat_model', 'model').message).toBe(message);
    }
    // Ollama's routes answer in Ollama's shape, streamed or not.
    for (const [path, stream] of [
      ['/api/chat', false],
      ['/api/chat', true],
      ['/v2/ollama/api/chat', false],
    ] as const) {
      const ollama = await http('POST', `${relay.api.url}${path}`, {
        body: { model: embeddingModel, messages: MESSAGES, stream },
        headers: bearer(tenant.key),
      });
      expect({ status: ollama.status, body: ollama.body, path, stream }).toEqual({
        status: 400,
        body: { error: message },
        path,
        stream,
      });
    }
    expect(await taskCount(tenant.org.id)).toBe(before);
    expect(await db().task.count({ where: { modelId: embeddingModel } })).toBe(0);

    // The org may still use it: the model lists show it, as OpenAI's model object (no kind).
    const listed = await http('GET', `${relay.api.url}/v1/models`, { headers: bearer(tenant.key) });
    expect(listed.body.data.find((m: { id: string }) => m.id === embeddingModel)).toEqual({
      id: embeddingModel,
      object: 'model',
      created: expect.any(Number),
      owned_by: 'switchyard',
    });
    const tags = await http('GET', `${relay.api.url}/api/tags`, { headers: bearer(tenant.key) });
    expect(tags.body.models.map((m: { name: string }) => m.name)).toEqual(expect.arrayContaining([embeddingModel]));
    // Ollama describes an embedding model by its one capability.
    const show = await http('POST', `${relay.api.url}/api/show`, {
      headers: bearer(tenant.key),
      body: { model: embeddingModel },
    });
    expect(show.body.capabilities).toEqual(['embedding']);
    const chatShow = await http('POST', `${relay.api.url}/api/show`, { headers: bearer(tenant.key), body: { model } });
    expect(chatShow.body.capabilities).toContain('completion');
  });

  test("a model's kind changed by the admin reaches the chat routes within about a second", async () => {
    const chat = () => relay.chat(tenant.key, { model: embeddingModel, messages: MESSAGES });
    try {
      await db().model.update({ where: { id: embeddingModel }, data: { kind: 'chat' } });
      await eventually('the chat model served', async () => (await chat()).status === 200, 5_000);
    } finally {
      await db().model.update({ where: { id: embeddingModel }, data: { kind: 'embedding' } });
    }
    await eventually('the embedding model refused', async () => (await chat()).status === 400, 5_000);
    assertError(await chat(), 400, 'not_a_chat_model', 'model');
  });
});
