import { createDevice, createTenant, db, recordsWritten, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import { MESSAGES, Relay, assertError, chunksOf, completedTask, streamedContent, taskCount } from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * Fields that depend on the device: 400 unsupported_by_node while no online device for the model
 * supports the feature, served as soon as one that does is online, and by that one.
 */
describe('chat completions: unsupported_by_node', () => {
  const relay = new Relay();
  let tenant: Tenant;
  const model = uniq('model');
  let bareDeviceId: string;

  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ];
  const toolsRequest = { model, messages: [{ role: 'user', content: 'Weather in Bern?' }], tools };

  beforeAll(async () => {
    // A request that no device takes ends with 503 queue_timeout after this, well within the suite's time.
    await relay.start({ QUEUE_TIMEOUT_MS: '10000' });
    tenant = await createTenant([model]);
    const device = await createDevice();
    bareDeviceId = device.id;
    // A device that declares no optional feature at all.
    await relay.device(device.token, { models: [model], tokens: 8, features: [] });
  });

  afterAll(() => relay.stop());

  async function unsupportedByNode(body: Record<string, unknown>, param: string) {
    const before = await taskCount(tenant.org.id);
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES, ...body });
    assertError(res, 400, 'unsupported_by_node', param);
    expect({
      actual: await taskCount(tenant.org.id),
      message: `a task row was written for ${JSON.stringify(body)}`,
    }).toEqual(expect.objectContaining({ actual: before }));
  }

  test('a plain request is served, without usage when the device reports none', async () => {
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES });
    expectStatus(res, 200);
    expect(res.body.choices[0].finish_reason).toBe('stop');
    expect(typeof res.body.choices[0].message.content).toBe('string');
    expect({ ok: !('usage' in res.body), message: `usage present: ${res.text}` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const task = await completedTask(res.body.task_address);
    expect(task.deviceId).toBe(bareDeviceId);

    const sse = await postSse(relay.url, tenant.key, { model, messages: MESSAGES, stream: true });
    const chunks = chunksOf(sse);
    expect(streamedContent(chunks)).toEqual([res.body.choices[0].message.content]);

    // n: 1 needs no feature.
    const one = await relay.chat(tenant.key, { model, messages: MESSAGES, n: 1 });
    expectStatus(one, 200);
  });

  test('each device-dependent field is 400 unsupported_by_node naming its param', async () => {
    await unsupportedByNode({ messages: toolsRequest.messages, tools }, 'tools');
    await unsupportedByNode({ tools, tool_choice: 'auto' }, 'tools');
    await unsupportedByNode({ functions: [{ name: 'lookup', parameters: { type: 'object' } }] }, 'tools');
    await unsupportedByNode({ response_format: { type: 'json_object' } }, 'response_format');
    await unsupportedByNode(
      {
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'card', schema: { type: 'object', properties: { a: { type: 'string' } } } },
        },
      },
      'response_format',
    );
    await unsupportedByNode({ logprobs: true }, 'logprobs');
    await unsupportedByNode({ logprobs: true, top_logprobs: 3 }, 'logprobs');
    await unsupportedByNode({ n: 2 }, 'n');
    await unsupportedByNode({ stream: true, stream_options: { include_usage: true } }, 'stream_options');
    await unsupportedByNode({ logit_bias: { '42': 5 } }, 'logit_bias');
    await unsupportedByNode({ reasoning_effort: 'low' }, 'reasoning_effort');

    // response_format text, include_usage false and logprobs false need nothing.
    for (const body of [
      { response_format: { type: 'text' } },
      { stream: true, stream_options: { include_usage: false } },
      { logprobs: false },
    ]) {
      const res = await relay.chat(tenant.key, { model, messages: MESSAGES, ...body });
      expect({ status: res.status, message: `${JSON.stringify(body)}: ${res.text}` }).toEqual(
        expect.objectContaining({ status: 200 }),
      );
    }
  });

  test('streamed requests get the error as JSON, before any event', async () => {
    const before = await taskCount(tenant.org.id);
    const sse = await postSse(relay.url, tenant.key, { ...toolsRequest, stream: true });
    expectStatus(sse, 400);
    expect(sse.headers.get('content-type') ?? '').toMatch(/^application\/json/);
    const body = JSON.parse(sse.text);
    expect(body.error.code).toBe('unsupported_by_node');
    expect(body.error.param).toBe('tools');
    expect(await taskCount(tenant.org.id)).toBe(before);
  });

  test('with a second device that supports tools, tool requests succeed and are served by it', async () => {
    // The device without tools connected first and stays idle: it must not keep the job from the other.
    const device = await createDevice();
    await relay.device(device.token, { models: [model], tokens: 8, features: ['tools'] });
    const ask = (i: number) =>
      relay.chat(tenant.key, { ...toolsRequest, messages: [{ role: 'user', content: `Weather in Bern, day ${i}?` }] });
    const check = async (res: Awaited<ReturnType<typeof ask>>) => {
      expectStatus(res, 200);
      expect(res.body.choices[0].finish_reason).toBe('tool_calls');
      expect(res.body.choices[0].message.tool_calls[0].function.name).toBe('get_weather');
      const task = await completedTask(res.body.task_address);
      expect(task.deviceId).toBe(device.id);
      expect(task.finishReason).toBe('tool_calls');
    };
    // One at a time, then several at once.
    for (let i = 0; i < 2; i++) {
      await check(await ask(i));
    }
    for (const res of await Promise.all([2, 3, 4, 5].map(ask))) {
      await check(res);
    }

    // Features no online device declares are still refused.
    await unsupportedByNode({ logprobs: true }, 'logprobs');
    await unsupportedByNode({ tools, n: 2 }, 'n');
    await recordsWritten();
    expect(
      await db().task.count({ where: { orgId: tenant.org.id, deviceId: bareDeviceId, finishReason: 'tool_calls' } }),
    ).toBe(0);
    // Plain requests are still served (by either device).
    const plain = await relay.chat(tenant.key, { model, messages: MESSAGES });
    expectStatus(plain, 200);
  });
});
