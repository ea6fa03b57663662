import { Ollama } from 'ollama';
import { createDevice, createTenant, db, http, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import {
  MESSAGES,
  PROMPT_WORDS,
  Relay,
  assertError,
  bearer,
  chunksOf,
  completedTask,
  streamedContent,
  taskCount,
} from './helpers';
import { expectStatus } from '../support/expect-status';

const IGNORED_HEADER = 'x-switchyard-ignored-params';

/** A conversation in which a tool was called and answered (the tool result is messages[2]). */
const TOOL_CONVERSATION = [
  { role: 'user', content: 'Weather in Bern?' },
  {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Bern"}' } }],
  },
  { role: 'tool', tool_call_id: 'call_1', content: '21 C and sunny' },
];
/** The same with the deprecated function_call and function result. */
const FUNCTION_CONVERSATION = [
  { role: 'user', content: 'Weather in Bern?' },
  { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Bern"}' } },
  { role: 'function', name: 'get_weather', content: '21 C and sunny' },
];
/** Ollama's shape of a tool call and its result. */
const OLLAMA_TOOL_CONVERSATION = [
  { role: 'user', content: 'Weather in Bern?' },
  { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Bern' } } }] },
  { role: 'tool', tool_name: 'get_weather', content: '21 C and sunny' },
];

/**
 * The field rules of issue 15, rule by rule, on both routes where they apply: tool results need a
 * tools device, web_search_options depends on the device, Ollama's top-level temperature, the
 * OpenGPU relay's paths and mode name, include_stop_str_in_output, usage with n > 1, the ignored
 * params header on errors, and Ollama's /api/show and /api/ps.
 */
describe('field rules', () => {
  const relay = new Relay();
  let tenant: Tenant;
  /** Served by a network device that declares no feature, then also by one with tools and web search. */
  const plain = uniq('plain');
  /** Served by a network device with tools, n, usage and reasoning. */
  const rich = `${uniq('rich')}:Q4_K_M`;
  /** Served by one of the tenant's own devices (direct), declaring no feature. */
  const own = uniq('own');
  /** Enabled, with no device at all. */
  const offline = uniq('offline');
  let toolsDeviceId: string;
  let ownDeviceId: string;

  beforeAll(async () => {
    await relay.start();
    tenant = await createTenant([plain, rich, own, offline]);
    const bare = await createDevice();
    const capable = await createDevice();
    const mine = await createDevice(tenant.org.name);
    ownDeviceId = mine.id;
    await relay.deviceSet([
      { token: bare.token, opts: { models: [plain], tokens: 8, features: [] } },
      {
        token: capable.token,
        opts: { models: [rich], tokens: 8, features: ['tools', 'n', 'stream_usage', 'reasoning_effort'] },
      },
      { token: mine.token, opts: { models: [own], tokens: 8, features: [] }, pool: tenant.org.id },
    ]);
  });

  afterAll(() => relay.stop());

  const ollamaChat = (body: unknown, path = '/api/chat') =>
    http('POST', `${relay.api.url}${path}`, { body, headers: bearer(tenant.key) });
  const ollamaClient = () => new Ollama({ host: relay.api.url, headers: { Authorization: `Bearer ${tenant.key}` } });

  async function refusedWithoutTask(send: () => Promise<{ status: number; body: any; text: string }>) {
    const before = await taskCount(tenant.org.id);
    const res = await send();
    expect({ actual: await taskCount(tenant.org.id), message: `a task row was written: ${res.text}` }).toEqual(
      expect.objectContaining({ actual: before }),
    );
    return res;
  }

  describe('1. tool and function results need a device with tools', () => {
    test('OpenAI route: 400 unsupported_by_node naming the message, in auto, network and direct mode', async () => {
      for (const [messages, mode] of [
        [TOOL_CONVERSATION, undefined],
        [TOOL_CONVERSATION, 'network'],
        [FUNCTION_CONVERSATION, 'auto'],
        [FUNCTION_CONVERSATION, 'opengpu'],
      ] as const) {
        const res = await refusedWithoutTask(() => relay.chat(tenant.key, { model: plain, messages, mode }));
        const error = assertError(res, 400, 'unsupported_by_node', 'messages[2]');
        expect(error.message).toMatch(/tools/);
      }
      const direct = await refusedWithoutTask(() =>
        relay.chat(tenant.key, { model: own, messages: TOOL_CONVERSATION, mode: 'direct' }),
      );
      assertError(direct, 400, 'unsupported_by_node', 'messages[2]');
    });

    test('Ollama route: 400 in Ollama’s error shape', async () => {
      const res = await refusedWithoutTask(() => ollamaChat({ model: plain, messages: OLLAMA_TOOL_CONVERSATION }));
      expectStatus(res, 400);
      expect(Object.keys(res.body)).toEqual(['error']);
      expect(res.body.error).toMatch(/No online device serving '.*' supports 'tools' \(needed by 'messages\[2\]'\)/);
    });
  });

  describe('2. web_search_options depends on the device', () => {
    test('with no device set up for web search: 400 unsupported_by_node naming the param', async () => {
      const res = await refusedWithoutTask(() =>
        relay.chat(tenant.key, {
          model: plain,
          messages: MESSAGES,
          web_search_options: { search_context_size: 'low' },
        }),
      );
      assertError(res, 400, 'unsupported_by_node', 'web_search_options');
      // A bad value is a 400 of its own, before any device is looked for.
      const bad = await relay.chat(tenant.key, {
        model: plain,
        messages: MESSAGES,
        web_search_options: { search_context_size: 'everything' },
      });
      assertError(bad, 400, 'invalid_request', 'web_search_options.search_context_size');
    });

    test('a device with tools and --web-search serves tool results and web searches', async () => {
      const device = await createDevice();
      toolsDeviceId = device.id;
      await relay.device(device.token, {
        models: [plain],
        tokens: 8,
        features: ['tools'],
        extraArgs: ['--web-search'],
      });
      const search = await relay.chat(tenant.key, {
        model: plain,
        messages: MESSAGES,
        web_search_options: { search_context_size: 'low', user_location: null },
      });
      expectStatus(search, 200);
      expect(search.body.choices[0].finish_reason).toBe('stop');
      expect((await completedTask(search.body.task_address)).deviceId).toBe(toolsDeviceId);

      // After a tool result the sim answers in words.
      for (const messages of [TOOL_CONVERSATION, FUNCTION_CONVERSATION]) {
        const res = await relay.chat(tenant.key, { model: plain, messages });
        expectStatus(res, 200);
        expect(res.body.choices[0].finish_reason).toBe('stop');
        expect((await completedTask(res.body.task_address)).deviceId).toBe(toolsDeviceId);
      }
      const ollama = await ollamaChat({ model: plain, messages: OLLAMA_TOOL_CONVERSATION });
      expectStatus(ollama, 200);
      expect(ollama.body.done_reason).toBe('stop');
      expect((await completedTask(ollama.body.task_address)).deviceId).toBe(toolsDeviceId);
    });
  });

  describe('3. Ollama: temperature at the top level', () => {
    test('is accepted (not ignored), validated, and options.temperature may come with it', async () => {
      const res = await ollamaChat({ model: plain, messages: MESSAGES, temperature: 0.2 });
      expectStatus(res, 200);
      expect(res.headers.get(IGNORED_HEADER)).toBeNull();
      const both = await ollamaChat({
        model: plain,
        messages: MESSAGES,
        temperature: 0.2,
        options: { temperature: 1 },
      });
      expectStatus(both, 200);

      const bad = await ollamaChat({ model: plain, messages: MESSAGES, temperature: 2.5 });
      expectStatus(bad, 400);
      expect(bad.body).toEqual({ error: 'invalid temperature: Too big: expected number to be <=2' });
    });
  });

  describe('4. the OpenGPU relay’s paths and mode name', () => {
    test('mode opengpu is network on both routes, and the answer says network', async () => {
      const openai = await relay.chat(tenant.key, { model: plain, messages: MESSAGES, mode: 'opengpu' });
      expectStatus(openai, 200);
      expect(openai.body.mode).toBe('network');
      expect(openai.body.task_address).toMatch(/^network:/);
      const ollama = await ollamaChat({ model: plain, messages: MESSAGES, mode: 'opengpu' });
      expectStatus(ollama, 200);
      expect(ollama.body.mode).toBe('network');
      // A direct-only model is not on the network.
      const none = await relay.chat(tenant.key, { model: own, messages: MESSAGES, mode: 'opengpu' });
      assertError(none, 503, 'no_device_available', 'model');
    });

    test('POST /v2/ollama/api/chat is /api/chat, errors in Ollama’s shape', async () => {
      const res = await ollamaChat({ model: plain, messages: MESSAGES }, '/v2/ollama/api/chat');
      expectStatus(res, 200);
      expect(res.headers.get('content-type') ?? '').toMatch(/^application\/json/);
      expect(res.body.model).toBe(plain);
      expect(res.body.done).toBe(true);
      expect(res.body.message.role).toBe('assistant');
      expect(res.body.message.content.length > 0).toBe(true);
      const row = await completedTask(res.body.task_address);
      expect(row.api).toBe('ollama');

      const streamed = await ollamaChat({ model: plain, messages: MESSAGES, stream: true }, '/v2/ollama/api/chat');
      expect(streamed.status).toBe(200);
      expect(streamed.headers.get('content-type') ?? '').toMatch(/^application\/x-ndjson/);
      const lines = streamed.text
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(lines.at(-1).done).toBe(true);
      expect(lines.map((l) => l.message.content).join('')).toBe(res.body.message.content);

      const missing = await ollamaChat({ messages: MESSAGES }, '/v2/ollama/api/chat');
      expect(missing.status).toBe(400);
      expect(missing.body).toEqual({ error: 'model is required' });
      const unauthenticated = await http('POST', `${relay.api.url}/v2/ollama/api/chat`, {
        body: { model: plain, messages: MESSAGES },
      });
      expect(unauthenticated.status).toBe(401);
      expect(Object.keys(unauthenticated.body)).toEqual(['error']);
      expect(typeof unauthenticated.body.error).toBe('string');
    });

    test('POST /v2/vllm/v1/chat/completions is the OpenAI route in direct mode only', async () => {
      const url = `${relay.api.url}/v2/vllm/v1/chat/completions`;
      const res = await http('POST', url, { body: { model: own, messages: MESSAGES }, headers: bearer(tenant.key) });
      expectStatus(res, 200);
      expect(res.body.object).toBe('chat.completion');
      expect(res.body.mode).toBe('direct');
      expect(res.body.task_address).toMatch(/^direct:/);
      expect((await completedTask(res.body.task_address)).deviceId).toBe(ownDeviceId);

      const sse = await postSse(url, tenant.key, { model: own, messages: MESSAGES, stream: true, mode: 'direct' });
      expect(streamedContent(chunksOf(sse))).toEqual([res.body.choices[0].message.content]);

      for (const mode of ['auto', 'network', 'opengpu']) {
        const refused = await refusedWithoutTask(() =>
          http('POST', url, { body: { model: own, messages: MESSAGES, mode }, headers: bearer(tenant.key) }),
        );
        assertError(refused, 400, 'invalid_request', 'mode');
      }
      // A model only the network serves is not served here.
      const networkOnly = await http('POST', url, {
        body: { model: plain, messages: MESSAGES },
        headers: bearer(tenant.key),
      });
      assertError(networkOnly, 503, 'no_device_available', 'model');
    });
  });

  describe('5. include_stop_str_in_output', () => {
    test('by default the stop text is dropped (OpenAI); with the option it ends the output, streamed or not', async () => {
      const full = await relay.chat(tenant.key, { model: rich, messages: MESSAGES });
      expectStatus(full, 200);
      const text: string = full.body.choices[0].message.content;
      const words = text.split(' ');
      // Starts inside a word, so the device cuts a token in two.
      const stop = `${words[3].slice(1)} ${words[4]}`;
      const at = text.indexOf(stop);
      expect({ ok: at > 0, text }).toEqual(expect.objectContaining({ ok: true }));

      const dropped = await relay.chat(tenant.key, { model: rich, messages: MESSAGES, stop });
      expect(dropped.body.choices[0].message.content).toBe(text.slice(0, at));
      expect(dropped.body.choices[0].finish_reason).toBe('stop');

      const body = { model: rich, messages: MESSAGES, stop: [stop], include_stop_str_in_output: true };
      const kept = await relay.chat(tenant.key, body);
      expectStatus(kept, 200);
      expect(kept.body.choices[0].message.content).toBe(text.slice(0, at + stop.length));
      expect(kept.body.choices[0].finish_reason).toBe('stop');
      expect(kept.headers.get(IGNORED_HEADER)).toBeNull();

      const sse = await postSse(relay.url, tenant.key, { ...body, stream: true });
      const chunks = chunksOf(sse);
      expect(streamedContent(chunks)).toEqual([text.slice(0, at + stop.length)]);
      expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');

      // Without a stop string it changes nothing.
      const alone = await relay.chat(tenant.key, { model: rich, messages: MESSAGES, include_stop_str_in_output: true });
      expect(alone.body.choices[0].message.content).toBe(text);
    });
  });

  describe('6. usage with n > 1', () => {
    test('completion_tokens counts the tokens of every choice, streamed or not', async () => {
      const res = await relay.chat(tenant.key, { model: rich, messages: MESSAGES, n: 3 });
      expectStatus(res, 200);
      expect(res.body.choices).toHaveLength(3);
      expect(res.body.usage).toEqual({
        prompt_tokens: PROMPT_WORDS,
        completion_tokens: 3 * 8,
        total_tokens: PROMPT_WORDS + 3 * 8,
      });
      const sse = await postSse(relay.url, tenant.key, {
        model: rich,
        messages: MESSAGES,
        n: 2,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = chunksOf(sse);
      expect(chunks.at(-1).choices).toEqual([]);
      expect(chunks.at(-1).usage).toEqual({
        prompt_tokens: PROMPT_WORDS,
        completion_tokens: 2 * 8,
        total_tokens: PROMPT_WORDS + 2 * 8,
      });
      const task = await completedTask(chunks[0].task_address);
      expect(task.completionTokens).toBe(16);
    });
  });

  describe('6b. an organization that follows the Nodea specification (compat)', () => {
    test('the stop text ends the output, and with n > 1 completion_tokens counts one choice; the record counts all', async () => {
      const nodea = await createTenant([rich]);
      await db().organization.update({ where: { id: nodea.org.id }, data: { compat: 'nodea' } });
      const full = await relay.chat(nodea.key, { model: rich, messages: MESSAGES });
      const text: string = full.body.choices[0].message.content;
      const words = text.split(' ');
      const stop = `${words[3]} ${words[4]}`;
      const at = text.indexOf(stop);
      const kept = await relay.chat(nodea.key, { model: rich, messages: MESSAGES, stop });
      expectStatus(kept, 200);
      expect(kept.body.choices[0].message.content).toBe(text.slice(0, at + stop.length));
      const sse = await postSse(relay.url, nodea.key, { model: rich, messages: MESSAGES, stop, stream: true });
      expect(streamedContent(chunksOf(sse))).toEqual([text.slice(0, at + stop.length)]);

      const three = await relay.chat(nodea.key, { model: rich, messages: MESSAGES, n: 3 });
      expectStatus(three, 200);
      expect(three.body.usage).toEqual({
        prompt_tokens: PROMPT_WORDS,
        completion_tokens: 8,
        total_tokens: PROMPT_WORDS + 8,
      });
      const streamed = await postSse(relay.url, nodea.key, {
        model: rich,
        messages: MESSAGES,
        n: 2,
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = chunksOf(streamed);
      expect(chunks.at(-1).usage).toEqual({
        prompt_tokens: PROMPT_WORDS,
        completion_tokens: 8,
        total_tokens: PROMPT_WORDS + 8,
      });
      // Billing counts the work done: every choice.
      const task = await completedTask(three.body.task_address);
      expect(task.completionTokens).toBe(24);
    });
  });

  describe('7. the ignored params header on error answers', () => {
    test('a 400 from validation or routing still lists the ignored fields, on both routes', async () => {
      const invalid = await relay.chat(tenant.key, { model: plain, messages: MESSAGES, seed: 7, temperature: 3 });
      assertError(invalid, 400, 'invalid_request', 'temperature');
      expect(invalid.headers.get(IGNORED_HEADER)).toBe('seed');

      const rejected = await relay.chat(tenant.key, { model: plain, messages: MESSAGES, user: 'u', audio: {} });
      assertError(rejected, 400, 'unsupported_parameter', 'audio');
      expect(rejected.headers.get(IGNORED_HEADER)).toBe('user');

      const unknownModel = await relay.chat(tenant.key, { model: uniq('nope'), messages: MESSAGES, store: true });
      assertError(unknownModel, 404, 'model_not_found', 'model');
      expect(unknownModel.headers.get(IGNORED_HEADER)).toBe('store');

      const ollama = await ollamaChat({ model: plain, messages: 'hi', keep_alive: '5m', options: { seed: 1 } });
      expect(ollama.status).toBe(400);
      expect(ollama.headers.get(IGNORED_HEADER)).toBe('keep_alive,options.seed');
    });
  });

  describe('Ollama’s /api/show and /api/ps', () => {
    test('ollama.show: details, model_info and capabilities from the devices serving the model', async () => {
      const show = await ollamaClient().show({ model: rich });
      expect(show.capabilities).toEqual(['completion', 'tools', 'thinking']);
      expect(show.details).toEqual({
        parent_model: '',
        format: '',
        family: '',
        families: null,
        parameter_size: '',
        quantization_level: 'Q4_K_M',
      });
      expect(show.model_info).toEqual({
        'general.name': rich,
        'switchyard.owned_by': 'switchyard',
        'switchyard.devices_online': 1,
      });
      const raw = await http('POST', `${relay.api.url}/api/show`, {
        body: { model: plain },
        headers: bearer(tenant.key),
      });
      expectStatus(raw, 200);
      expect(Object.keys(raw.body).sort()).toEqual([
        'capabilities',
        'details',
        'license',
        'model_info',
        'modelfile',
        'modified_at',
        'parameters',
        'template',
      ]);
      // One device without features and one with tools (and web search, which Ollama has no name for).
      expect(raw.body.capabilities).toEqual(['completion', 'tools']);
      expect(raw.body.model_info['switchyard.devices_online']).toBe(2);
      const idle = await ollamaClient().show({ model: offline });
      expect(idle.capabilities).toEqual(['completion']);
    });

    test('ollama.show: unknown model 404, no model 400, no key 401, in Ollama’s shape', async () => {
      await expect(ollamaClient().show({ model: uniq('nope') })).rejects.toMatchObject({ status_code: 404 });
      const missing = await http('POST', `${relay.api.url}/api/show`, { body: {}, headers: bearer(tenant.key) });
      expect(missing.status).toBe(400);
      expect(missing.body).toEqual({ error: 'model is required' });
      const anonymous = await http('POST', `${relay.api.url}/api/show`, { body: { model: plain } });
      expect(anonymous.status).toBe(401);
      expect(Object.keys(anonymous.body)).toEqual(['error']);
    });

    test('ollama.ps: the models with a device online for the caller, and no other', async () => {
      const { models } = await ollamaClient().ps();
      expect(models.map((m) => m.name).sort()).toEqual([own, plain, rich].sort());
      for (const m of models) {
        expect(m.model).toBe(m.name);
        expect(m.size).toBe(0);
        expect(m.size_vram).toBe(0);
        expect(m.digest).toMatch(/^[0-9a-f]{64}$/);
        expect({
          ok: new Date(m.expires_at).getTime() > Date.now() - 60_000,
          expires_at: String(m.expires_at),
        }).toEqual(expect.objectContaining({ ok: true }));
      }
      // Another organization sees the network's models it has enabled, not this one's own devices.
      const other = await createTenant([plain, own]);
      const theirs = await new Ollama({
        host: relay.api.url,
        headers: { Authorization: `Bearer ${other.key}` },
      }).ps();
      expect(theirs.models.map((m) => m.name)).toEqual([plain]);
    });
  });
});
