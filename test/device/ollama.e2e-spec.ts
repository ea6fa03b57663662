import { closeDb, createDevice, createTenant, startApi, startDispatcher, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import { chat, completionsUrl, logLines, startRuntimeDevice, taskRow, waitFeatures } from './support/device';
import { FakeOllama } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** The ollama backend through the real api, dispatcher and agent: what reaches Ollama, and what comes back. */
describe('device agent with Ollama', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let device: Proc;
  let tenant: Tenant;
  let token: string;
  const ollama = new FakeOllama(['llama3.2:3b', 'qwen3:8b']);
  // Catalog names that differ from Ollama's, as with --model <public-id>=<upstream-name>.
  const llama = uniq('bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M');
  const qwen = uniq('Qwen/Qwen3-8B');
  const apiKey = 'upstream-secret-7f3a9c';

  beforeAll(async () => {
    await ollama.start();
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([llama, qwen]);
    ({ token } = await createDevice());
    device = await startRuntimeDevice(dispatcher, token, {
      backend: 'ollama',
      upstream: ollama.url,
      models: [`${llama}=llama3.2:3b`, `${qwen}=qwen3:8b`],
      extraArgs: ['--api-key', apiKey],
    });
  });

  afterAll(async () => {
    await Promise.all([device?.stop(), api?.stop(), dispatcher?.stop(), ollama.stop()]);
    await closeDb();
  });

  it('maps messages, roles, tools, tool results, format, options and think; thinking and usage come back', async () => {
    const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
    const weatherTool = {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Current weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    };
    ollama.handlers.set(
      'llama3.2:3b',
      FakeOllama.reply({
        thinking: ['Checking', ' the tool result.'],
        content: ['{"answer":', '"21 degrees"}'],
        promptEvalCount: 42,
        evalCount: 9,
      }),
    );
    const res = await chat(api, tenant, {
      model: llama,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_abc', content: '{"temp_c":21}' },
        { role: 'user', content: 'And in words?' },
      ],
      tools: [weatherTool],
      tool_choice: 'auto',
      temperature: 0.3,
      top_p: 0.9,
      max_tokens: 100,
      stop: ['END', '###'],
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } },
      reasoning_effort: 'medium',
    });
    expectStatus(res, 200);
    expect(ollama.lastChat().body).toEqual({
      model: 'llama3.2:3b',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }],
        },
        { role: 'tool', content: '{"temp_c":21}', tool_name: 'get_weather' },
        { role: 'user', content: 'And in words?' },
      ],
      stream: true,
      options: {
        num_predict: 100,
        temperature: 0.3,
        top_p: 0.9,
        stop: ['END', '###'],
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
      },
      tools: [weatherTool],
      format: schema,
      think: 'medium',
    });
    expect(ollama.lastChat().headers['content-type']).toBe('application/json');
    const choice = res.body.choices[0];
    expect(choice.message.content).toBe('{"answer":"21 degrees"}');
    expect(choice.message.reasoning_content).toBe('Checking the tool result.');
    expect(choice.finish_reason).toBe('stop');
    expect(res.body.usage).toEqual({ prompt_tokens: 42, completion_tokens: 9, total_tokens: 51 });
    expect(res.body.model).toBe(llama);
    const row = await taskRow(tenant, res.body.task_address);
    expect(row.status).toBe('completed');
    expect(row.finishReason).toBe('stop');
    expect(row.promptTokens).toBe(42);
    expect(row.completionTokens).toBe(9);
  });

  it('streams to the client as Ollama streams, with done_reason length as finish_reason length', async () => {
    ollama.handlers.set(
      'llama3.2:3b',
      FakeOllama.reply({ content: ['One', ' two', ' three'], doneReason: 'length', promptEvalCount: 5, evalCount: 3 }),
    );
    const res = await postSse(completionsUrl(api), tenant.key, {
      model: llama,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 3,
      messages: [{ role: 'user', content: 'Count.' }],
    });
    expectStatus(res, 200);
    expect(ollama.lastChat().body.options).toEqual({ num_predict: 3 });
    const pieces = res.events
      .filter((e) => e !== '[DONE]')
      .flatMap((e) => e.choices)
      .map((c: any) => c.delta?.content)
      .filter((c: unknown) => typeof c === 'string' && c !== '');
    expect(pieces).toEqual(['One', ' two', ' three']);
    const finish = res.events.flatMap((e) => (e === '[DONE]' ? [] : e.choices)).find((c: any) => c.finish_reason);
    expect(finish.finish_reason).toBe('length');
    expect(res.events.at(-2).usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    expect(res.events.at(-1)).toBe('[DONE]');
  });

  it('keeps the stop string with include_stop_str_in_output: Ollama gets no stop, the agent cuts after it', async () => {
    const reply = FakeOllama.reply({
      content: ['The', ' answer', ' is', ' 4', '2.', ' More', ' text'],
      promptEvalCount: 6,
      evalCount: 7,
    });
    ollama.handlers.set('llama3.2:3b', reply);
    const body = {
      model: llama,
      messages: [{ role: 'user', content: 'The answer?' }],
      stop: ['42'],
      include_stop_str_in_output: true,
    };
    const res = await chat(api, tenant, body);
    expectStatus(res, 200);
    expect(ollama.lastChat().body.options).toEqual({ num_predict: 512 });
    expect(res.body.choices[0].message.content).toBe('The answer is 42');
    expect(res.body.choices[0].finish_reason).toBe('stop');
    // Ollama was left before its final line, which carries the counts.
    expect(res.body.usage).toBeUndefined();

    const sse = await postSse(completionsUrl(api), tenant.key, { ...body, stream: true });
    expectStatus(sse, 200);
    const chunks = sse.events.filter((e) => e !== '[DONE]').flatMap((e) => e.choices);
    expect(chunks.map((c: any) => c.delta?.content ?? '').join('')).toBe('The answer is 42');
    expect(chunks.find((c: any) => c.finish_reason)?.finish_reason).toBe('stop');
    // Asked for usage: the usage chunk says there is none, not zeros.
    const counted = await postSse(completionsUrl(api), tenant.key, {
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    const usageChunk = counted.events.filter((e) => e !== '[DONE]').at(-1);
    expect(usageChunk).toMatchObject({ choices: [], usage: null });

    // A stop string that never comes: the whole answer, with Ollama's counts.
    const whole = await chat(api, tenant, { ...body, stop: ['never'] });
    expect(whole.body.choices[0].message.content).toBe('The answer is 42. More text');
    expect(whole.body.usage).toEqual({ prompt_tokens: 6, completion_tokens: 7, total_tokens: 13 });
    // Without the option, the stop strings go to Ollama, which drops them itself.
    await chat(api, tenant, { ...body, include_stop_str_in_output: false });
    expect(ollama.lastChat().body.options).toEqual({ num_predict: 512, stop: ['42'] });
  });

  it("returns Ollama's tool calls whole, with JSON string arguments and finish_reason tool_calls", async () => {
    ollama.handlers.set(
      'llama3.2:3b',
      FakeOllama.reply({ toolCalls: [{ name: 'get_weather', arguments: { city: 'Paris', days: 2 } }] }),
    );
    const res = await chat(api, tenant, {
      model: llama,
      tools: [{ type: 'function', function: { name: 'get_weather' } }],
    });
    expectStatus(res, 200);
    const message = res.body.choices[0].message;
    expect(message.content).toBeNull();
    expect(message.tool_calls).toHaveLength(1);
    expect(message.tool_calls[0].id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(message.tool_calls[0].function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris","days":2}' });
    expect(res.body.choices[0].finish_reason).toBe('tool_calls');
  });

  it('sends format "json" for json_object, and no tools with tool_choice none', async () => {
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: ['{}'] }));
    const json = await chat(api, tenant, { model: llama, response_format: { type: 'json_object' } });
    expectStatus(json, 200);
    expect(ollama.lastChat().body.format).toBe('json');
    const none = await chat(api, tenant, {
      model: llama,
      tools: [{ type: 'function', function: { name: 'get_weather' } }],
      tool_choice: 'none',
    });
    expectStatus(none, 200);
    expect('tools' in ollama.lastChat().body).toBe(false);
  });

  it('sends think: true to a model that refuses think levels, and remembers it', async () => {
    const handled = FakeOllama.reply({ thinking: ['Hmm.'], content: ['Yes.'] });
    ollama.handlers.set('qwen3:8b', async (ctx) => {
      if (typeof ctx.body.think === 'string') {
        await FakeOllama.error(400, `think value "${ctx.body.think}" is not supported for this model`)(ctx);
        return;
      }
      await handled(ctx);
    });
    const before = ollama.chats().length;
    const first = await chat(api, tenant, { model: qwen, reasoning_effort: 'low' });
    expectStatus(first, 200);
    expect(first.body.choices[0].message.reasoning_content).toBe('Hmm.');
    expect(
      ollama
        .chats()
        .slice(before)
        .map((r) => r.body.think),
    ).toEqual(['low', true]);
    const second = await chat(api, tenant, { model: qwen, reasoning_effort: 'high' });
    expectStatus(second, 200);
    expect(
      ollama
        .chats()
        .slice(before)
        .map((r) => r.body.think),
    ).toEqual(['low', true, true]);
  });

  it('declares logprobs only for an Ollama that has them (0.12.11+), and never n or logit_bias', async () => {
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: ['Hi', '!'], logprobs: true }));
    const res = await chat(api, tenant, { model: llama, logprobs: true, top_logprobs: 1 });
    expectStatus(res, 200);
    expect(ollama.lastChat().body.logprobs).toBe(true);
    expect(ollama.lastChat().body.top_logprobs).toBe(1);
    expect(res.body.choices[0].logprobs.content).toEqual([
      {
        token: 'Hi',
        logprob: -0.25,
        bytes: [72, 105],
        top_logprobs: [{ token: 'Hi', logprob: -0.25, bytes: [72, 105] }],
      },
      { token: '!', logprob: -0.25, bytes: [33], top_logprobs: [{ token: '!', logprob: -0.25, bytes: [33] }] },
    ]);
    for (const extra of [{ n: 2 }, { logit_bias: { '42': 5 } }]) {
      const refused = await chat(api, tenant, { model: llama, ...extra });
      expectStatus(refused, 400);
      expect(refused.body.error.code).toBe('unsupported_by_node');
    }
    // An older Ollama ignores logprobs without a word: once the agent sees the version, it stops declaring them.
    ollama.version = '0.12.10';
    await waitFeatures(token, llama, (f) => !f.includes('logprobs'));
    const older = await chat(api, tenant, { model: llama, logprobs: true });
    expectStatus(older, 400);
    expect(older.body.error.code).toBe('unsupported_by_node');
    expect(older.body.error.param).toBe('logprobs');
    ollama.version = '0.12.11';
    await waitFeatures(token, llama, (f) => f.includes('logprobs'));
    expect((await chat(api, tenant, { model: llama, logprobs: true })).status).toBe(200);
  });

  it('sends the API key to Ollama, never logs it, and logs one line per task without content', async () => {
    expect(ollama.lastChat().headers.authorization).toBe(`Bearer ${apiKey}`);
    expect(ollama.requests.some((r) => r.path === '/api/tags' && r.headers.authorization === `Bearer ${apiKey}`)).toBe(
      true,
    );
    expect(device.output).not.toContain(apiKey);
    expect(device.output).not.toContain('Weather in Paris');
    expect(device.output).not.toContain('21 degrees');
    const tasks = logLines(device).filter((l) => l.msg === 'task finished');
    const addresses = new Set(tasks.map((l) => l.task_address));
    // one line per task
    expect(addresses.size).toBe(tasks.length);
    const first = tasks.find((l) => l.prompt_tokens === 42)!;
    expect(first.model).toBe(llama);
    expect(first.outcome).toBe('completed');
    expect(first.completion_tokens).toBe(9);
    expect(typeof first.ttft_ms).toBe('number');
    expect(typeof first.total_ms).toBe('number');
  });
});
