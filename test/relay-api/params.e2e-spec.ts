import type OpenAI from 'openai';
import { createDevice, createTenant, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import {
  MESSAGES,
  PROMPT_WORDS,
  Relay,
  assertChoiceFraming,
  assertChunkEnvelope,
  assertError,
  chunksOf,
  completedTask,
  finishReasons,
  streamedContent,
  taskCount,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * POST /v1/chat/completions, the fields that shape the answer: stop, n, tools (and the deprecated
 * functions), response_format, logprobs, logit_bias, reasoning_effort, served by a sim device that
 * declares every feature.
 */
describe('chat completions: stop, n, tools, response_format, logprobs', () => {
  const relay = new Relay();
  let tenant: Tenant;
  let client: OpenAI;
  const TOKENS = 16;
  const model = uniq('model');
  /** The reply to MESSAGES without any option, fetched once. */
  let baseline: string;

  const weatherTool = {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'days'],
      },
    },
  };
  const timeTool = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object' } } };

  beforeAll(async () => {
    await relay.start();
    tenant = await createTenant([model]);
    const device = await createDevice();
    await relay.device(device.token, { models: [model], tokens: TOKENS });
    client = relay.client(tenant.key);
    baseline = (await client.chat.completions.create({ model, messages: [...MESSAGES] })).choices[0].message.content!;
    expect(baseline.split(' ')).toHaveLength(TOKENS);
  });

  afterAll(() => relay.stop());

  test('stop strings cut the reply before the first match, as a string or a list of up to 4', async () => {
    const words = baseline.split(' ');
    const stop = ` ${words[6]} ${words[7]}`;
    const expected = baseline.slice(0, baseline.indexOf(stop));
    expect(expected.length).toBeGreaterThan(0);
    expect(expected.length).toBeLessThan(baseline.length);

    const asString = await client.chat.completions.create({ model, messages: [...MESSAGES], stop });
    expect(asString.choices[0].message.content).toBe(expected);
    expect(asString.choices[0].finish_reason).toBe('stop');
    expect(asString.choices[0].message.content).not.toContain(stop);

    const asList = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      stop: ['zzz-never', stop, 'qqq-never', 'xxx-never'],
    });
    expect(asList.choices[0].message.content).toBe(expected);
    expect(asList.choices[0].finish_reason).toBe('stop');

    // The earliest of several matches wins.
    const earlier = ` ${words[3]}`;
    const earliest = await client.chat.completions.create({ model, messages: [...MESSAGES], stop: [stop, earlier] });
    expect(earliest.choices[0].message.content).toBe(baseline.slice(0, baseline.indexOf(earlier)));

    // Streamed: the same text, then finish_reason stop.
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, stop: [stop] });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    expect(streamedContent(chunks)).toEqual([expected]);
    expect(finishReasons(chunks)[0].reason).toBe('stop');

    // A stop string that never appears changes nothing.
    const never = await client.chat.completions.create({ model, messages: [...MESSAGES], stop: 'zzz-never' });
    expect(never.choices[0].message.content).toBe(baseline);
  });

  test('n: 2 gives two choices, non-streamed and streamed', async () => {
    const res = await client.chat.completions.create({ model, messages: [...MESSAGES], n: 2 });
    expect(res.choices).toHaveLength(2);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1]);
    for (const choice of res.choices) {
      expect(choice.finish_reason).toBe('stop');
      expect(choice.message.role).toBe('assistant');
      expect(choice.message.refusal).toBeNull();
      expect(choice.logprobs).toBeNull();
      expect(choice.message.content!.split(' ')).toHaveLength(TOKENS);
    }
    expect(res.choices[0].message.content).not.toBe(res.choices[1].message.content);
    expect(res.usage).toEqual({
      prompt_tokens: PROMPT_WORDS,
      completion_tokens: 2 * TOKENS,
      total_tokens: PROMPT_WORDS + 2 * TOKENS,
    });

    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, n: 2 });
    const chunks = chunksOf(sse);
    assertChunkEnvelope(chunks, model);
    assertChoiceFraming(chunks, 2);
    expect(finishReasons(chunks).map((f) => f.reason)).toEqual(['stop', 'stop']);
    expect(streamedContent(chunks)).toEqual(res.choices.map((c) => c.message.content));

    // n: 1 is a single choice, the same as without n.
    const one = await client.chat.completions.create({ model, messages: [...MESSAGES], n: 1 });
    expect(one.choices).toHaveLength(1);
    expect(one.choices[0].message.content).toBe(baseline);
  });

  test('tools: finish_reason tool_calls with one whole call to the first tool', async () => {
    const res = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'What is the weather in Lyon?' }],
      tools: [weatherTool, timeTool],
    });
    const [choice] = res.choices;
    expect(res.choices).toHaveLength(1);
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.role).toBe('assistant');
    expect(choice.message.content).toBeNull();
    expect(choice.message.refusal).toBeNull();
    const calls = choice.message.tool_calls!;
    expect(calls).toHaveLength(1);
    const [call] = calls;
    expect(call.type).toBe('function');
    expect(typeof call.id).toBe('string');
    expect(call.id.length).toBeGreaterThan(0);
    if (call.type !== 'function') {
      throw new Error("expected call.type === 'function'");
    }
    expect(call.function.name).toBe('get_weather');
    const args = JSON.parse(call.function.arguments);
    expect(typeof args.city).toBe('string');
    expect(Number.isInteger(args.days)).toBe(true);
    expect(args.days >= 1).toBe(true);
    expect(args.days <= 7).toBe(true);
    expect(res.usage?.completion_tokens ?? 0).toBeGreaterThan(0);
    const task = await completedTask((res as any).task_address);
    expect(task.finishReason).toBe('tool_calls');

    // tool_choice auto is the same; parallel_tool_calls: true is accepted.
    const auto = await relay.chat(tenant.key, {
      model,
      messages: [{ role: 'user', content: 'What is the weather in Lyon?' }],
      tools: [weatherTool, timeTool],
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    expectStatus(auto, 200);
    expect(auto.body.choices[0].finish_reason).toBe('tool_calls');
    expect(auto.body.choices[0].message.tool_calls).toEqual(calls);
  });

  test('tools streamed: one chunk carries the whole call, then finish_reason tool_calls', async () => {
    const messages = [{ role: 'user' as const, content: 'What is the weather in Oslo?' }];
    const plain = await client.chat.completions.create({ model, messages, tools: [weatherTool, timeTool] });
    const expected = plain.choices[0].message.tool_calls![0];

    const sse = await postSse(relay.url, tenant.key, { model, messages, tools: [weatherTool, timeTool], stream: true });
    const chunks = chunksOf(sse);
    assertChunkEnvelope(chunks, model);
    assertChoiceFraming(chunks, 1);
    const withCalls = chunks.filter((c) => c.choices.some((x: any) => x.delta?.tool_calls));
    // tool call split over several chunks
    expect(withCalls).toHaveLength(1);
    const [delta] = withCalls[0].choices;
    expect(delta.finish_reason).toBeNull();
    expect(delta.delta.tool_calls).toHaveLength(1);
    expect(delta.delta.tool_calls[0]).toEqual({
      index: 0,
      id: expected.id,
      type: 'function',
      function: {
        name: 'get_weather',
        arguments: (expected as { function: { arguments: string } }).function.arguments,
      },
    });
    JSON.parse(delta.delta.tool_calls[0].function.arguments);
    expect(finishReasons(chunks)[0].reason).toBe('tool_calls');
    expect(finishReasons(chunks)[0].at).toBeGreaterThan(chunks.indexOf(withCalls[0]));

    // The SDK sees the same.
    const stream = await client.chat.completions.create({
      model,
      messages,
      tools: [weatherTool, timeTool],
      stream: true,
    });
    const sdkCalls: unknown[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        sdkCalls.push(...(choice.delta.tool_calls ?? []));
        finish = choice.finish_reason ?? finish;
      }
    }
    expect(sdkCalls).toEqual(delta.delta.tool_calls);
    expect(finish).toBe('tool_calls');
  });

  test('tool_choice none answers in words; a tool result gets an answer in words', async () => {
    const none = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      tools: [weatherTool],
      tool_choice: 'none',
    });
    expect(none.choices[0].finish_reason).toBe('stop');
    expect(typeof none.choices[0].message.content).toBe('string');
    expect(none.choices[0].message.content!.length).toBeGreaterThan(0);
    expect(none.choices[0].message.tool_calls).toBeUndefined();

    const afterTool = await client.chat.completions.create({
      model,
      tools: [weatherTool],
      messages: [
        { role: 'user', content: 'What is the weather in Lyon?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 24 degrees.' },
      ],
    });
    expect(afterTool.choices[0].finish_reason).toBe('stop');
    expect(afterTool.choices[0].message.content!.length).toBeGreaterThan(0);
  });

  test('the deprecated functions are converted to tools', async () => {
    const messages = [{ role: 'user', content: 'Look up the timetable.' }];
    const fn = {
      name: 'lookup',
      description: 'Looks things up',
      parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
    };
    const res = await relay.chat(tenant.key, { model, messages, functions: [fn] });
    expectStatus(res, 200);
    const [choice] = res.body.choices;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    expect(choice.message.tool_calls[0].type).toBe('function');
    expect(choice.message.tool_calls[0].function.name).toBe('lookup');
    expect(typeof JSON.parse(choice.message.tool_calls[0].function.arguments).query).toBe('string');

    // The same as sending it as a tool.
    const asTool = await relay.chat(tenant.key, { model, messages, tools: [{ type: 'function', function: fn }] });
    expectStatus(asTool, 200);
    expect(asTool.body.choices[0].message.tool_calls).toEqual(choice.message.tool_calls);

    // function_call auto / none map to tool_choice.
    const auto = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: 'auto' });
    expectStatus(auto, 200);
    expect(auto.body.choices[0].finish_reason).toBe('tool_calls');
    const none = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: 'none' });
    expectStatus(none, 200);
    expect(none.body.choices[0].finish_reason).toBe('stop');
    expect(typeof none.body.choices[0].message.content).toBe('string');

    // A named function_call is tool_choice with a named function: refused, and nothing is queued.
    const before = await taskCount(tenant.org.id);
    const named = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: { name: 'lookup' } });
    assertError(named, 400, 'unsupported_parameter', 'function_call');
    expect(await taskCount(tenant.org.id)).toBe(before);
  });

  test('response_format json_object returns parseable JSON, non-streamed and streamed', async () => {
    const res = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      response_format: { type: 'json_object' },
    });
    expect(res.choices[0].finish_reason).toBe('stop');
    const value = JSON.parse(res.choices[0].message.content!);
    expect({
      ok: Boolean(value && typeof value === 'object' && !Array.isArray(value)),
      content: res.choices[0].message.content!,
    }).toEqual(expect.objectContaining({ ok: true }));

    const sse = await postSse(relay.url, tenant.key, {
      model,
      messages: MESSAGES,
      stream: true,
      response_format: { type: 'json_object' },
    });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    expect(streamedContent(chunks)).toEqual([res.choices[0].message.content]);

    // type text is the plain reply.
    const text = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      response_format: { type: 'text' },
    });
    expect(text.choices[0].message.content).toBe(baseline);
  });

  test('response_format json_schema returns JSON following the schema', async () => {
    const schema = {
      type: 'object',
      properties: {
        station: { type: 'string' },
        platform: { type: 'integer', minimum: 1, maximum: 9 },
        delayed: { type: 'boolean' },
      },
      required: ['station', 'platform', 'delayed'],
      additionalProperties: false,
    };
    const res = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      response_format: { type: 'json_schema', json_schema: { name: 'departure', schema, strict: true } },
    });
    const value = JSON.parse(res.choices[0].message.content!);
    expect(Object.keys(value).sort()).toEqual(['delayed', 'platform', 'station']);
    expect(typeof value.station).toBe('string');
    expect(Number.isInteger(value.platform)).toBe(true);
    expect(value.platform >= 1).toBe(true);
    expect(value.platform <= 9).toBe(true);
    expect(typeof value.delayed).toBe('boolean');
  });

  test('logprobs with top_logprobs: one entry per token with that many alternatives', async () => {
    const res = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      logprobs: true,
      top_logprobs: 3,
    });
    const [choice] = res.choices;
    const entries = choice.logprobs?.content;
    if (!Array.isArray(entries)) {
      throw new Error(JSON.stringify(choice.logprobs));
    }
    expect(entries.length).toBe(res.usage?.completion_tokens);
    expect(entries.map((e) => e.token).join('')).toBe(choice.message.content);
    for (const entry of entries) {
      expect(typeof entry.token).toBe('string');
      expect(entry.logprob).toBeLessThanOrEqual(0);
      expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
      expect(entry.top_logprobs).toHaveLength(3);
      for (const alt of entry.top_logprobs) {
        expect(typeof alt.token).toBe('string');
        expect(alt.logprob).toBeLessThanOrEqual(0);
      }
    }

    // Without top_logprobs: entries with no alternatives.
    const bare = await client.chat.completions.create({ model, messages: [...MESSAGES], logprobs: true });
    expect(bare.choices[0].logprobs!.content!.length).toBeGreaterThan(0);
    expect(bare.choices[0].logprobs!.content!.every((e) => e.top_logprobs.length === 0)).toBe(true);

    // top_logprobs 20 is the maximum.
    const max = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      logprobs: true,
      top_logprobs: 20,
    });
    expect(max.choices[0].logprobs!.content!.every((e) => e.top_logprobs.length === 20)).toBe(true);

    // Streamed: each content chunk carries the logprobs of its token.
    const sse = await postSse(relay.url, tenant.key, {
      model,
      messages: MESSAGES,
      stream: true,
      logprobs: true,
      top_logprobs: 2,
    });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    const content = chunks.filter((c) => c.choices[0]?.delta?.content);
    expect(content).toHaveLength(TOKENS);
    for (const chunk of content) {
      const [lp] = chunk.choices[0].logprobs.content;
      expect(chunk.choices[0].logprobs.content).toHaveLength(1);
      expect(lp.token).toBe(chunk.choices[0].delta.content);
      expect(lp.top_logprobs).toHaveLength(2);
    }
  });

  test('logit_bias and reasoning_effort are sent on to the device', async () => {
    const bias = await relay.chat(tenant.key, { model, messages: MESSAGES, logit_bias: { '50256': -100 } });
    expectStatus(bias, 200);
    expect(bias.body.choices[0].finish_reason).toBe('stop');
    for (const effort of ['low', 'medium', 'high']) {
      const res = await relay.chat(tenant.key, { model, messages: MESSAGES, reasoning_effort: effort });
      expectStatus(res, 200);
      expect(res.body.choices[0].finish_reason).toBe('stop');
      expect(typeof res.body.choices[0].message.content).toBe('string');
    }
  });
});
