import assert from 'node:assert/strict';
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
    assert.equal(baseline.split(' ').length, TOKENS);
  });

  afterAll(() => relay.stop());

  test('stop strings cut the reply before the first match, as a string or a list of up to 4', async () => {
    const words = baseline.split(' ');
    const stop = ` ${words[6]} ${words[7]}`;
    const expected = baseline.slice(0, baseline.indexOf(stop));
    assert.ok(expected.length > 0 && expected.length < baseline.length);

    const asString = await client.chat.completions.create({ model, messages: [...MESSAGES], stop });
    assert.equal(asString.choices[0].message.content, expected);
    assert.equal(asString.choices[0].finish_reason, 'stop');
    assert.ok(!asString.choices[0].message.content.includes(stop));

    const asList = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      stop: ['zzz-never', stop, 'qqq-never', 'xxx-never'],
    });
    assert.equal(asList.choices[0].message.content, expected);
    assert.equal(asList.choices[0].finish_reason, 'stop');

    // The earliest of several matches wins.
    const earlier = ` ${words[3]}`;
    const earliest = await client.chat.completions.create({ model, messages: [...MESSAGES], stop: [stop, earlier] });
    assert.equal(earliest.choices[0].message.content, baseline.slice(0, baseline.indexOf(earlier)));

    // Streamed: the same text, then finish_reason stop.
    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true, stop: [stop] });
    const chunks = chunksOf(sse);
    assertChoiceFraming(chunks, 1);
    expect(streamedContent(chunks)).toEqual([expected]);
    assert.equal(finishReasons(chunks)[0].reason, 'stop');

    // A stop string that never appears changes nothing.
    const never = await client.chat.completions.create({ model, messages: [...MESSAGES], stop: 'zzz-never' });
    assert.equal(never.choices[0].message.content, baseline);
  });

  test('n: 2 gives two choices, non-streamed and streamed', async () => {
    const res = await client.chat.completions.create({ model, messages: [...MESSAGES], n: 2 });
    assert.equal(res.choices.length, 2);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1]);
    for (const choice of res.choices) {
      assert.equal(choice.finish_reason, 'stop');
      assert.equal(choice.message.role, 'assistant');
      assert.equal(choice.message.refusal, null);
      assert.equal(choice.logprobs, null);
      assert.equal(choice.message.content!.split(' ').length, TOKENS);
    }
    assert.notEqual(res.choices[0].message.content, res.choices[1].message.content);
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
    assert.equal(one.choices.length, 1);
    assert.equal(one.choices[0].message.content, baseline);
  });

  test('tools: finish_reason tool_calls with one whole call to the first tool', async () => {
    const res = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'What is the weather in Lyon?' }],
      tools: [weatherTool, timeTool],
    });
    const [choice] = res.choices;
    assert.equal(res.choices.length, 1);
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.refusal, null);
    const calls = choice.message.tool_calls!;
    assert.equal(calls.length, 1);
    const [call] = calls;
    assert.equal(call.type, 'function');
    assert.equal(typeof call.id, 'string');
    assert.ok(call.id.length > 0);
    assert.ok(call.type === 'function');
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7);
    assert.ok((res.usage?.completion_tokens ?? 0) > 0);
    const task = await completedTask((res as any).task_address);
    assert.equal(task.finishReason, 'tool_calls');

    // tool_choice auto is the same; parallel_tool_calls: true is accepted.
    const auto = await relay.chat(tenant.key, {
      model,
      messages: [{ role: 'user', content: 'What is the weather in Lyon?' }],
      tools: [weatherTool, timeTool],
      tool_choice: 'auto',
      parallel_tool_calls: true,
    });
    assert.equal(auto.status, 200, auto.text);
    assert.equal(auto.body.choices[0].finish_reason, 'tool_calls');
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
    assert.equal(withCalls.length, 1, 'tool call split over several chunks');
    const [delta] = withCalls[0].choices;
    assert.equal(delta.finish_reason, null);
    assert.equal(delta.delta.tool_calls.length, 1);
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
    assert.equal(finishReasons(chunks)[0].reason, 'tool_calls');
    assert.ok(finishReasons(chunks)[0].at > chunks.indexOf(withCalls[0]));

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
    assert.equal(finish, 'tool_calls');
  });

  test('tool_choice none answers in words; a tool result gets an answer in words', async () => {
    const none = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      tools: [weatherTool],
      tool_choice: 'none',
    });
    assert.equal(none.choices[0].finish_reason, 'stop');
    assert.equal(typeof none.choices[0].message.content, 'string');
    assert.ok(none.choices[0].message.content!.length > 0);
    assert.equal(none.choices[0].message.tool_calls, undefined);

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
    assert.equal(afterTool.choices[0].finish_reason, 'stop');
    assert.ok(afterTool.choices[0].message.content!.length > 0);
  });

  test('the deprecated functions are converted to tools', async () => {
    const messages = [{ role: 'user', content: 'Look up the timetable.' }];
    const fn = {
      name: 'lookup',
      description: 'Looks things up',
      parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
    };
    const res = await relay.chat(tenant.key, { model, messages, functions: [fn] });
    assert.equal(res.status, 200, res.text);
    const [choice] = res.body.choices;
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.tool_calls.length, 1);
    assert.equal(choice.message.tool_calls[0].type, 'function');
    assert.equal(choice.message.tool_calls[0].function.name, 'lookup');
    assert.equal(typeof JSON.parse(choice.message.tool_calls[0].function.arguments).query, 'string');

    // The same as sending it as a tool.
    const asTool = await relay.chat(tenant.key, { model, messages, tools: [{ type: 'function', function: fn }] });
    assert.equal(asTool.status, 200, asTool.text);
    expect(asTool.body.choices[0].message.tool_calls).toEqual(choice.message.tool_calls);

    // function_call auto / none map to tool_choice.
    const auto = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: 'auto' });
    assert.equal(auto.status, 200, auto.text);
    assert.equal(auto.body.choices[0].finish_reason, 'tool_calls');
    const none = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: 'none' });
    assert.equal(none.status, 200, none.text);
    assert.equal(none.body.choices[0].finish_reason, 'stop');
    assert.equal(typeof none.body.choices[0].message.content, 'string');

    // A named function_call is tool_choice with a named function: refused, and nothing is queued.
    const before = await taskCount(tenant.org.id);
    const named = await relay.chat(tenant.key, { model, messages, functions: [fn], function_call: { name: 'lookup' } });
    assertError(named, 400, 'unsupported_parameter', 'function_call');
    assert.equal(await taskCount(tenant.org.id), before);
  });

  test('response_format json_object returns parseable JSON, non-streamed and streamed', async () => {
    const res = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      response_format: { type: 'json_object' },
    });
    assert.equal(res.choices[0].finish_reason, 'stop');
    const value = JSON.parse(res.choices[0].message.content!);
    assert.ok(value && typeof value === 'object' && !Array.isArray(value), res.choices[0].message.content!);

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
    assert.equal(text.choices[0].message.content, baseline);
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
    assert.equal(typeof value.station, 'string');
    assert.ok(Number.isInteger(value.platform) && value.platform >= 1 && value.platform <= 9);
    assert.equal(typeof value.delayed, 'boolean');
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
    assert.ok(Array.isArray(entries), JSON.stringify(choice.logprobs));
    assert.equal(entries.length, res.usage?.completion_tokens);
    assert.equal(entries.map((e) => e.token).join(''), choice.message.content);
    for (const entry of entries) {
      assert.equal(typeof entry.token, 'string');
      assert.ok(entry.logprob <= 0);
      expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
      assert.equal(entry.top_logprobs.length, 3);
      for (const alt of entry.top_logprobs) {
        assert.equal(typeof alt.token, 'string');
        assert.ok(alt.logprob <= 0);
      }
    }

    // Without top_logprobs: entries with no alternatives.
    const bare = await client.chat.completions.create({ model, messages: [...MESSAGES], logprobs: true });
    assert.ok(bare.choices[0].logprobs!.content!.length > 0);
    assert.ok(bare.choices[0].logprobs!.content!.every((e) => e.top_logprobs.length === 0));

    // top_logprobs 20 is the maximum.
    const max = await client.chat.completions.create({
      model,
      messages: [...MESSAGES],
      logprobs: true,
      top_logprobs: 20,
    });
    assert.ok(max.choices[0].logprobs!.content!.every((e) => e.top_logprobs.length === 20));

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
    assert.equal(content.length, TOKENS);
    for (const chunk of content) {
      const [lp] = chunk.choices[0].logprobs.content;
      assert.equal(chunk.choices[0].logprobs.content.length, 1);
      assert.equal(lp.token, chunk.choices[0].delta.content);
      assert.equal(lp.top_logprobs.length, 2);
    }
  });

  test('logit_bias and reasoning_effort are sent on to the device', async () => {
    const bias = await relay.chat(tenant.key, { model, messages: MESSAGES, logit_bias: { '50256': -100 } });
    assert.equal(bias.status, 200, bias.text);
    assert.equal(bias.body.choices[0].finish_reason, 'stop');
    for (const effort of ['low', 'medium', 'high']) {
      const res = await relay.chat(tenant.key, { model, messages: MESSAGES, reasoning_effort: effort });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.choices[0].finish_reason, 'stop');
      assert.equal(typeof res.body.choices[0].message.content, 'string');
    }
  });
});
