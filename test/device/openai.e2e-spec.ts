import { closeDb, createDevice, createTenant, startApi, startDispatcher, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import { chat, completionsUrl, startRuntimeDevice, taskRow, waitFeatures } from './support/device';
import { FakeOpenAI } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** The openai backend (llama.cpp server, vLLM, LM Studio) through the real api, dispatcher and agent. */
describe('device agent with an OpenAI-compatible server', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let device: Proc;
  let tenant: Tenant;
  let token: string;
  const upstreamModel = 'meta-llama/Llama-3.2-3B-Instruct';
  const server = new FakeOpenAI([upstreamModel]);
  const model = uniq('llama-3.2-3b');
  const apiKey = 'sk-local-5b2e';

  beforeAll(async () => {
    await server.start();
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([model]);
    ({ token } = await createDevice());
    device = await startRuntimeDevice(dispatcher, token, {
      backend: 'openai',
      upstream: server.baseUrl,
      models: [`${model}=${upstreamModel}`],
      extraArgs: ['--api-key', apiKey],
    });
  });

  afterAll(async () => {
    await Promise.all([device?.stop(), api?.stop(), dispatcher?.stop(), server.stop()]);
    await closeDb();
  });

  const weatherTool = {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    },
  };

  it('passes the request through and joins tool call fragments into whole calls', async () => {
    server.handlers.set(
      upstreamModel,
      FakeOpenAI.reply({
        toolCalls: [
          { id: 'call_x1', name: 'get_weather', arguments: ['{"ci', 'ty": "Par', 'is"}'] },
          { id: 'call_x2', name: 'get_time', arguments: ['{}'] },
        ],
        finishReason: 'tool_calls',
        usage: { prompt_tokens: 20, completion_tokens: 11, total_tokens: 31 },
      }),
    );
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Oslo?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_0', content: '{"temp_c":3}' },
      { role: 'user', content: 'And Paris?' },
    ];
    const res = await chat(api, tenant, {
      model,
      messages,
      tools: [weatherTool],
      tool_choice: 'auto',
      temperature: 0.7,
      top_p: 0.95,
      max_tokens: 200,
      stop: ['</s>'],
      frequency_penalty: 0.1,
      presence_penalty: -0.2,
      response_format: { type: 'json_object' },
      logit_bias: { '128001': -100 },
    });
    expectStatus(res, 200);
    expect(server.lastChat().body).toEqual({
      model: upstreamModel,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 200,
      temperature: 0.7,
      top_p: 0.95,
      frequency_penalty: 0.1,
      presence_penalty: -0.2,
      response_format: { type: 'json_object' },
      tools: [weatherTool],
      tool_choice: 'auto',
      logit_bias: { '128001': -100 },
      stop: ['</s>'],
    });
    expect(server.lastChat().headers.authorization).toBe(`Bearer ${apiKey}`);
    const choice = res.body.choices[0];
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([
      { id: 'call_x1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
      { id: 'call_x2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
    ]);
    expect(choice.finish_reason).toBe('tool_calls');
    expect(res.body.usage).toEqual({ prompt_tokens: 20, completion_tokens: 11, total_tokens: 31 });
    const row = await taskRow(tenant, res.body.task_address);
    expect(row.finishReason).toBe('tool_calls');
    expect(row.promptTokens).toBe(20);
    expect(row.completionTokens).toBe(11);
  });

  it('streams tool calls to the client whole, never as fragments', async () => {
    server.handlers.set(
      upstreamModel,
      FakeOpenAI.reply({
        toolCalls: [{ id: 'call_s1', name: 'get_weather', arguments: ['{"city"', ':"Rome"}'] }],
        finishReason: 'tool_calls',
      }),
    );
    const res = await postSse(completionsUrl(api), tenant.key, {
      model,
      stream: true,
      tools: [weatherTool],
      messages: [{ role: 'user', content: 'Weather in Rome?' }],
    });
    expectStatus(res, 200);
    const calls = res.events
      .filter((e) => e !== '[DONE]')
      .flatMap((e) => e.choices)
      .flatMap((c: any) => c.delta?.tool_calls ?? []);
    expect(calls).toEqual([
      { index: 0, id: 'call_s1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
    ]);
    expect(res.events.at(-2).choices[0].finish_reason).toBe('tool_calls');
  });

  it('streams n choices with logprobs, reasoning, finish reasons and usage through to the client', async () => {
    server.handlers.set(
      upstreamModel,
      FakeOpenAI.reply({
        reasoning: ['Two', ' answers.'],
        choices: [
          ['A', 'b'],
          ['C', 'd', 'e'],
        ],
        finishReason: 'length',
        logprobs: true,
        usage: { prompt_tokens: 9, completion_tokens: 5, total_tokens: 14 },
      }),
    );
    const res = await postSse(completionsUrl(api), tenant.key, {
      model,
      stream: true,
      stream_options: { include_usage: true },
      n: 2,
      logprobs: true,
      top_logprobs: 1,
      max_tokens: 3,
      messages: [{ role: 'user', content: 'Two letters.' }],
    });
    expectStatus(res, 200);
    const body = server.lastChat().body;
    expect(body.n).toBe(2);
    expect(body.logprobs).toBe(true);
    expect(body.top_logprobs).toBe(1);
    const chunks = res.events.filter((e) => e !== '[DONE]').flatMap((e) => e.choices);
    const text = (index: number) =>
      chunks
        .filter((c: any) => c.index === index)
        .map((c: any) => c.delta?.content ?? '')
        .join('');
    expect(text(0)).toBe('Ab');
    expect(text(1)).toBe('Cde');
    const reasoning = chunks.map((c: any) => c.delta?.reasoning_content ?? '').join('');
    expect(reasoning).toBe('Two answers.');
    const tokens = chunks.flatMap((c: any) => c.logprobs?.content ?? []).map((l: any) => l.token);
    expect(tokens.sort()).toEqual(['A', 'C', 'b', 'd', 'e']);
    const finishes = chunks.filter((c: any) => c.finish_reason).map((c: any) => [c.index, c.finish_reason]);
    expect(finishes).toEqual([
      [0, 'length'],
      [1, 'length'],
    ]);
    expect(res.events.at(-2).usage).toEqual({ prompt_tokens: 9, completion_tokens: 5, total_tokens: 14 });
  });

  it('keeps the stop string with include_stop_str_in_output, per choice, streamed or not', async () => {
    server.handlers.set(
      upstreamModel,
      FakeOpenAI.reply({
        choices: [
          ['Red', ', gre', 'en', ' and', ' blue'],
          ['Blue', ' and', ' gr', 'een'],
        ],
        usage: { prompt_tokens: 4, completion_tokens: 9, total_tokens: 13 },
      }),
    );
    const body = {
      model,
      n: 2,
      messages: [{ role: 'user', content: 'Colours?' }],
      stop: ['green'],
      include_stop_str_in_output: true,
    };
    const res = await chat(api, tenant, body);
    expectStatus(res, 200);
    const sent = server.lastChat().body;
    expect(sent.stop).toBeUndefined();
    expect(sent.include_stop_str_in_output).toBeUndefined();
    expect(res.body.choices.map((c: any) => c.message.content)).toEqual(['Red, green', 'Blue and green']);
    expect(res.body.choices.map((c: any) => c.finish_reason)).toEqual(['stop', 'stop']);

    const sse = await postSse(completionsUrl(api), tenant.key, { ...body, stream: true });
    expectStatus(sse, 200);
    const chunks = sse.events.filter((e) => e !== '[DONE]').flatMap((e) => e.choices);
    const text = (index: number) =>
      chunks
        .filter((c: any) => c.index === index)
        .map((c: any) => c.delta?.content ?? '')
        .join('');
    expect([text(0), text(1)]).toEqual(['Red, green', 'Blue and green']);

    // By default the stop strings go to the server, as OpenAI's clients expect.
    await chat(api, tenant, { ...body, include_stop_str_in_output: undefined });
    expect(server.lastChat().body.stop).toEqual(['green']);
  });

  it('fails a server that ignores n or logprobs instead of passing off a partial answer', async () => {
    server.handlers.set(upstreamModel, FakeOpenAI.reply({ choices: [['only one']] }));
    for (const extra of [{ n: 2 }, { logprobs: true }]) {
      const res = await chat(api, tenant, { model, ...extra });
      expectStatus(res, 502);
      expect(res.body.error.code).toBe('upstream_bad_response');
      expect((await taskRow(tenant, undefined)).errorCode).toBe('upstream_bad_response');
    }
  });

  it("stops declaring n for llama.cpp's server, which refuses more than one choice", async () => {
    server.handlers.set(upstreamModel, FakeOpenAI.reply({ choices: [['x'], ['y']] }));
    expect((await chat(api, tenant, { model, n: 2 })).status).toBe(200);
    server.ownedBy = 'llamacpp';
    await waitFeatures(token, model, (f) => !f.includes('n'));
    const refused = await chat(api, tenant, { model, n: 2 });
    expectStatus(refused, 400);
    expect(refused.body.error.code).toBe('unsupported_by_node');
    expect(refused.body.error.param).toBe('n');
    server.handlers.set(upstreamModel, FakeOpenAI.reply({ choices: [['x']], logprobs: true }));
    expect((await chat(api, tenant, { model, logprobs: true })).status).toBe(200);
    expect((await chat(api, tenant, { model, reasoning_effort: 'low' })).status).toBe(400);
    server.ownedBy = 'vllm';
    await waitFeatures(token, model, (f) => f.includes('n'));
  });
});
