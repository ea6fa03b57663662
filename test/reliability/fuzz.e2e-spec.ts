import fc from 'fast-check';
import { closeDb, createDevice, createTenant, db, uniq, recordsWritten } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  adminAuth,
  assertOllamaError,
  assertOpenAIError,
  bearer,
  loopbackAddress,
  rawHttp,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
} from './helpers';
import type { RawResponse } from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * Hostile input against a running api: property-based fuzzing (fast-check) of the chat routes and
 * the admin API, plus targeted payloads (prototype pollution, huge numbers, deep nesting, invalid
 * UTF-8, wrong content types, empty bodies). Whatever arrives: never a 5xx, never a hang, always
 * the documented error shape, and nothing written unless the request was valid.
 */

/** Per property: enough runs to find the common holes, few enough to keep the file short. */
const RUNS = 120;
/** A counterexample is reported as found; shrinking it would cost a request per step. */
const FC_OPTIONS = {
  numRuns: RUNS,
  endOnFailure: true,
  includeErrorInReport: true,
  interruptAfterTimeLimit: 20_000,
} as const;
/** A request that has not been answered in this long counts as a hang. */
const HANG_MS = 10_000;

type Family = 'openai' | 'ollama';

/** Raw JSON fragments spliced into a body where a value would go (JSON.stringify cannot write them). */
const RAW_LITERALS = [
  '1e400',
  '-1e400',
  '1e-400',
  '-0',
  '123456789012345678901234567890',
  '9007199254740993',
  '0.30000000000000004',
  '"\\ud800"',
  '"\\u0000"',
  '"\\udfff\\ud800"',
];

/** A value in a body: JSON values, raw literals (as `{ $raw }`), nasty strings and numbers, deep nesting, long strings. */
const nastyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: fc.constantFrom(...RAW_LITERALS).map(($raw) => ({ $raw })) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'NaN',
      'Infinity',
      '-Infinity',
      '1e999',
      '0x10',
      '',
      ' ',
      'null',
      'true',
      '__proto__',
      'constructor',
      'auto',
      'direct',
      'text',
      'function',
      'user',
      'assistant',
    ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      0,
      -1,
      1,
      1.5,
      2,
      8,
      9,
      20,
      21,
      100,
      -100.5,
      Number.MAX_SAFE_INTEGER,
      Number.MAX_SAFE_INTEGER + 2,
      Number.MAX_VALUE,
      -Number.MAX_VALUE,
      Number.MIN_VALUE,
    ),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 3_000 }).map((n) => ({ $raw: '['.repeat(n) + ']'.repeat(n) })) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 100_000 }).map((n) => 'x'.repeat(n)) },
  { weight: 1, arbitrary: fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 10 }) },
  { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }) },
);

/** JSON text of a value, with `{ $raw }` objects replaced by their raw fragment. */
function toJson(value: unknown): string | null {
  const raws: string[] = [];
  let text: string;
  try {
    text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === 'bigint') {
        return v.toString();
      }
      if (v && typeof v === 'object' && '$raw' in v && Object.keys(v).length === 1) {
        raws.push(String(v.$raw));
        return `@@RAW${raws.length - 1}@@`;
      }
      return v;
    });
  } catch {
    return null;
  }
  if (text === undefined) {
    return null;
  }
  return text.replace(/"@@RAW(\d+)@@"/g, (_m, i: string) => raws[Number(i)]);
}

/** Sets a value at a path in a (cloned) object tree, creating containers on the way. */
function setAt(root: unknown, path: (string | number)[], value: unknown): unknown {
  if (path.length === 0) {
    return value;
  }
  const [head, ...rest] = path;
  const container: any =
    root && typeof root === 'object'
      ? Array.isArray(root)
        ? [...root]
        : { ...root }
      : typeof head === 'number'
        ? []
        : {};
  if (typeof head === 'string' && Array.isArray(container)) {
    return container;
  }
  // Defined as an own property even for names like __proto__ (the JSON text then carries it as a key).
  Object.defineProperty(container, head, {
    value: setAt(container[head], rest, value),
    enumerable: true,
    writable: true,
    configurable: true,
  });
  return container;
}

const CHAT_PATHS: (string | number)[][] = [
  [],
  ['model'],
  ['messages'],
  ['messages', 0],
  ['messages', 0, 'role'],
  ['messages', 0, 'content'],
  ['messages', 0, 'content', 0],
  ['messages', 0, 'content', 0, 'type'],
  ['messages', 0, 'content', 0, 'text'],
  ['messages', 0, 'name'],
  ['messages', 0, 'tool_calls'],
  ['messages', 1],
  ['stream'],
  ['temperature'],
  ['top_p'],
  ['max_tokens'],
  ['max_completion_tokens'],
  ['stop'],
  ['n'],
  ['tools'],
  ['tools', 0, 'function', 'name'],
  ['tools', 0, 'function', 'parameters'],
  ['tool_choice'],
  ['response_format'],
  ['response_format', 'type'],
  ['response_format', 'json_schema'],
  ['logprobs'],
  ['top_logprobs'],
  ['logit_bias'],
  ['stream_options'],
  ['stream_options', 'include_usage'],
  ['mode'],
  ['frequency_penalty'],
  ['presence_penalty'],
  ['reasoning_effort'],
  ['web_search_options'],
  ['web_search_options', 'user_location'],
  ['include_stop_str_in_output'],
  ['functions'],
  ['function_call'],
  ['parallel_tool_calls'],
  ['seed'],
  ['user'],
  ['metadata'],
];

const OLLAMA_PATHS: (string | number)[][] = [
  [],
  ['model'],
  ['messages'],
  ['messages', 0],
  ['messages', 0, 'role'],
  ['messages', 0, 'content'],
  ['messages', 0, 'images'],
  ['messages', 0, 'tool_calls'],
  ['stream'],
  ['mode'],
  ['temperature'],
  ['think'],
  ['format'],
  ['tools'],
  ['options'],
  ['options', 'temperature'],
  ['options', 'top_p'],
  ['options', 'num_predict'],
  ['options', 'stop'],
  ['options', 'seed'],
  ['keep_alive'],
];

/** A path into the body: a known field, or a key of any name (ASCII, Unicode, control characters). */
const pathArb = (paths: (string | number)[][]): fc.Arbitrary<(string | number)[]> =>
  fc.oneof(
    { weight: 5, arbitrary: fc.constantFrom<(string | number)[]>(...paths) },
    {
      weight: 1,
      arbitrary: fc
        .oneof(fc.string({ minLength: 1, maxLength: 12 }), fc.string({ unit: 'binary', minLength: 1, maxLength: 12 }))
        .map((k): (string | number)[] => [k]),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom<(string | number)[]>(['options', 'unknown_option'], ['messages', 0, 'extra']),
    },
  );

const mutations = (paths: (string | number)[][]) =>
  fc.array(fc.tuple(pathArb(paths), nastyValue), { minLength: 1, maxLength: 3 });

describe('hostile input (fuzzing)', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  const model = uniq('fuzz');
  let tenant: Tenant;
  /** The org whose limits PATCH fuzzing may change (not the chat tenant's). */
  let patched: Tenant;
  /** Requests with wrong credentials come from other addresses than the rest of the suites'. */
  const address = () => loopbackAddress();

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([model]);
    patched = await createTenant();
    const [a, b, direct] = await Promise.all([createDevice(), createDevice(), createDevice(tenant.org.name)]);
    devices.push(
      ...(await Promise.all([
        startDevice(dispatcher.url, a.token, { models: [model], tokens: 2 }),
        startDevice(dispatcher.url, b.token, { models: [model], tokens: 2 }),
        startDevice(dispatcher.url, direct.token, { models: [model], tokens: 2 }, { pool: tenant.org.id }),
      ])),
    );
  });

  afterAll(async () => {
    await stopAll(devices, [api, dispatcher].filter(Boolean));
    await closeDb();
  });

  /** The org's task rows, once every record so far is written (they are written behind). */
  const taskCount = async () => {
    await recordsWritten();
    return db().task.count({ where: { orgId: tenant.org.id } });
  };
  /** The strings a JSON text holds (keys and values), where an organization name or model id would be. */
  function stringsIn(text: string): Set<string> {
    const out = new Set<string>();
    for (const match of text.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
      try {
        out.add(JSON.parse(match[0]) as string);
      } catch {
        out.add(match[1]);
      }
    }
    return out;
  }

  /**
   * What an admin request could have written since it started: organizations and models named in
   * it, and models enabled or keys created or revoked for this suite's organizations. (Other suites
   * write to the same tables at the same time, so whole-table counts would not do.)
   */
  async function writesSince(since: Date, names: Set<string>): Promise<string[]> {
    const ours = { in: [tenant.org.id, patched.org.id] };
    const [orgs, models, enabled, keys] = await Promise.all([
      db().organization.findMany({ where: { createdAt: { gte: since } }, select: { name: true } }),
      db().model.findMany({ where: { createdAt: { gte: since } }, select: { id: true } }),
      db().orgModel.findMany({ where: { orgId: ours, createdAt: { gte: since } }, select: { modelId: true } }),
      db().apiKey.findMany({
        where: { orgId: ours, OR: [{ createdAt: { gte: since } }, { revokedAt: { gte: since } }] },
        select: { id: true },
      }),
    ]);
    return [
      ...orgs.filter((o) => names.has(o.name)).map((o) => `organization ${o.name}`),
      ...models.filter((m) => names.has(m.id)).map((m) => `model ${m.id}`),
      ...enabled.map((e) => `model ${e.modelId} enabled`),
      ...keys.map((k) => `key ${k.id} created or revoked`),
    ];
  }
  /** When a request starts (the database and this process share a clock). */
  const now = () => new Date();

  function send(
    method: string,
    path: string,
    body: string | Buffer | undefined,
    headers: Record<string, string> = {},
    timeoutMs = HANG_MS,
  ) {
    return rawHttp(method, `${api.url}${path}`, {
      body,
      headers: { 'content-type': 'application/json', ...headers },
      timeoutMs,
    });
  }

  /** Not a 5xx, and an error in the documented shape of the route family. */
  function checkShape(res: RawResponse, family: Family, what: string): void {
    expect({ ok: res.status < 500, message: `${what}\n→ ${res.status} ${res.text.slice(0, 400)}` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    if (res.status >= 400) {
      if (family === 'openai') {
        assertOpenAIError(res, null);
      } else {
        assertOllamaError(res, null);
      }
    }
  }

  /** A successful chat answer is a whole answer: a completion, or a stream that ends properly. */
  function checkAnswer(res: RawResponse, family: Family, what: string): void {
    const type = String(res.headers['content-type'] ?? '');
    if (family === 'openai') {
      if (type.startsWith('text/event-stream')) {
        expect({
          ok: res.text.endsWith('data: [DONE]\n\n'),
          message: `${what}: stream without [DONE]: ${res.text.slice(-300)}`,
        }).toEqual(expect.objectContaining({ ok: true }));
      } else {
        expect({ object: res.body?.object, message: `${what}: ${res.text.slice(0, 300)}` }).toEqual(
          expect.objectContaining({ object: 'chat.completion' }),
        );
      }
    } else {
      const last = JSON.parse(res.text.trim().split('\n').at(-1)!);
      expect({ done: last.done, message: `${what}: ${res.text.slice(-300)}` }).toEqual(
        expect.objectContaining({ done: true }),
      );
    }
  }

  /** One chat request: the shape, the answer, and whether a task row was written. */
  async function chatCase(
    path: string,
    family: Family,
    body: string | Buffer,
    headers: Record<string, string>,
    timeoutMs = HANG_MS,
  ) {
    const before = await taskCount();
    const res = await send('POST', path, body, headers, timeoutMs);
    const what = `POST ${path} ${JSON.stringify(headers)} ${String(body).slice(0, 300)}`;
    checkShape(res, family, what);
    const after = await taskCount();
    if (res.status === 200) {
      checkAnswer(res, family, what);
      expect({ after, message: `${what}: one task for one answer` }).toEqual(
        expect.objectContaining({ after: before + 1 }),
      );
    } else {
      expect({ after, message: `${what}: a refused request wrote a task (${res.status})` }).toEqual(
        expect.objectContaining({ after: before }),
      );
    }
    return res;
  }

  const validChat = () => ({ model, messages: [{ role: 'user', content: 'fuzz' }], max_tokens: 2 });
  const validOllama = () => ({ model, messages: [{ role: 'user', content: 'fuzz' }], stream: false });

  describe('property: chat routes', () => {
    it('arbitrary JSON bodies for POST /v1/chat/completions and /api/chat', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(fc.jsonValue(), fc.object(), fc.anything()),
          fc.constantFrom<[string, Family]>(['/v1/chat/completions', 'openai'], ['/api/chat', 'ollama']),
          async (value, [path, family]) => {
            const json = toJson(value);
            if (json !== null) {
              await chatCase(path, family, json, bearer(tenant.key));
            }
          },
        ),
        FC_OPTIONS,
      );
    });

    it('mutations of a valid OpenAI chat request (wrong types, huge numbers, nesting, long and odd strings)', async () => {
      await fc.assert(
        fc.asyncProperty(mutations(CHAT_PATHS), async (changes) => {
          let body: unknown = validChat();
          for (const [path, value] of changes) {
            body = setAt(body, path, value);
          }
          const json = toJson(body);
          if (json !== null) {
            await chatCase('/v1/chat/completions', 'openai', json, bearer(tenant.key));
          }
        }),
        FC_OPTIONS,
      );
    });

    it('mutations of a valid Ollama chat request', async () => {
      await fc.assert(
        fc.asyncProperty(mutations(OLLAMA_PATHS), async (changes) => {
          let body: unknown = validOllama();
          for (const [path, value] of changes) {
            body = setAt(body, path, value);
          }
          const json = toJson(body);
          if (json !== null) {
            await chatCase('/api/chat', 'ollama', json, bearer(tenant.key));
          }
        }),
        FC_OPTIONS,
      );
    });

    it('arbitrary headers with a valid body', async () => {
      const headerName = fc
        .stringMatching(/^[a-z][a-z0-9-]{0,15}$/)
        .filter(
          (n) =>
            ![
              'host',
              'content-length',
              'transfer-encoding',
              'connection',
              'expect',
              'upgrade',
              'te',
              'trailer',
              'keep-alive',
            ].includes(n),
        );
      const headerValue = fc.stringMatching(/^[\x20-\x7e]{0,60}$/);
      const special = fc.record(
        {
          authorization: fc.constantFrom(
            `Bearer ${tenant.key}`,
            `bearer ${tenant.key}`,
            `Bearer  ${tenant.key} `,
            `Basic ${tenant.key}`,
            tenant.key,
            'Bearer',
            `Bearer ${tenant.key}x`,
            `Bearer ${tenant.key.slice(0, -1)}`,
            'Bearer sy_',
          ),
          'x-api-key': fc.constantFrom(tenant.key, ` ${tenant.key} `, 'sy_x', ''),
          'content-type': fc.constantFrom(
            'application/json',
            'application/json; charset=utf-8',
            'application/json; charset=latin1',
            'text/plain',
            'application/xml',
            'multipart/form-data; boundary=x',
            'application/x-www-form-urlencoded',
            '*/*',
            'garbage',
            '',
          ),
          'content-encoding': fc.constantFrom('gzip', 'br', 'deflate', 'identity', 'x'),
          accept: fc.constantFrom('text/event-stream', 'application/x-ndjson', '*/*', 'image/png'),
          'x-request-id': fc.oneof(fc.stringMatching(/^[\x20-\x7e]{0,200}$/), fc.constant('a'.repeat(129))),
        },
        { requiredKeys: [] },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.dictionary(headerName, headerValue, { maxKeys: 6 }),
          special,
          fc.constantFrom<[string, Family]>(['/v1/chat/completions', 'openai'], ['/api/chat', 'ollama']),
          async (random, chosen, [path, family]) => {
            const headers: Record<string, string> = { ...random, ...chosen };
            const body = JSON.stringify(family === 'openai' ? validChat() : validOllama());
            const before = await taskCount();
            const res = await rawHttp('POST', `${api.url}${path}`, {
              body,
              headers,
              localAddress: address(),
              timeoutMs: HANG_MS,
            });
            const what = `POST ${path} ${JSON.stringify(headers)}`;
            checkShape(res, family, what);
            const after = await taskCount();
            expect({ after, message: `${what}: ${res.status}` }).toEqual(
              expect.objectContaining({ after: before + (res.status === 200 ? 1 : 0) }),
            );
            if (res.status === 200) {
              checkAnswer(res, family, what);
            }
            const requestId = res.headers['x-request-id'];
            expect(typeof requestId).toBe('string');
            if (/^[A-Za-z0-9._-]{1,128}$/.test(chosen['x-request-id'] ?? '')) {
              expect(requestId).toBe(chosen['x-request-id']);
            }
          },
        ),
        FC_OPTIONS,
      );
    });
  });

  describe('property: admin API', () => {
    it('POST /admin/orgs and /admin/models and PATCH /admin/orgs/{org}: 4xx in the OpenAI shape, nothing written unless valid', async () => {
      const orgBody = fc.oneof(
        fc.jsonValue(),
        mutations([[], ['name']]).map((changes) => changes.reduce<unknown>((b, [p, v]) => setAt(b, p, v), {})),
        fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,70}$/).map((name) => ({ name })),
      );
      const modelBody = fc.oneof(
        fc.jsonValue(),
        mutations([[], ['id'], ['max_output_tokens'], ['owned_by']]).map((changes) =>
          changes.reduce<unknown>((b, [p, v]) => setAt(b, p, v), { id: uniq('m') }),
        ),
      );
      const limitsBody = fc.oneof(
        fc.jsonValue(),
        mutations([[], ['rpm'], ['concurrency'], ['max_queued']]).map((changes) =>
          changes.reduce<unknown>((b, [p, v]) => setAt(b, p, v), {}),
        ),
      );
      const limitsOf = async () =>
        JSON.stringify(
          await db().organization.findUniqueOrThrow({
            where: { id: patched.org.id },
            select: { rpmLimit: true, concurrencyLimit: true, maxQueued: true },
          }),
        );
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(
            orgBody.map((b) => ['POST', '/admin/orgs', b, 201] as const),
            modelBody.map((b) => ['POST', '/admin/models', b, 201] as const),
            limitsBody.map((b) => ['PATCH', `/admin/orgs/${patched.org.name}`, b, 200] as const),
          ),
          async ([method, path, value, success]) => {
            const json = toJson(value);
            if (json === null) {
              return;
            }
            const [since, limits] = [now(), await limitsOf()];
            const res = await send(method, path, json, adminAuth);
            const what = `${method} ${path} ${json.slice(0, 300)}`;
            checkShape(res, 'openai', what);
            if (res.status !== success) {
              expect(await writesSince(since, stringsIn(json))).toEqual([]);
              expect({
                actual: await limitsOf(),
                message: `${what}: a refused request changed limits (${res.status})`,
              }).toEqual(expect.objectContaining({ actual: limits }));
            }
          },
        ),
        FC_OPTIONS,
      );
    });

    it('arbitrary path parameters on client and admin routes', async () => {
      const routes: [string, (p: string) => string, Family, Record<string, string>][] = [
        ['GET', (p) => `/v1/models/${p}`, 'openai', bearer(tenant.key)],
        ['GET', (p) => `/v1/tasks/${p}`, 'openai', bearer(tenant.key)],
        ['GET', (p) => `/admin/orgs/${p}/keys`, 'openai', adminAuth],
        ['PATCH', (p) => `/admin/orgs/${p}`, 'openai', adminAuth],
        ['DELETE', (p) => `/admin/keys/${p}`, 'openai', adminAuth],
        ['DELETE', (p) => `/admin/devices/${p}`, 'openai', adminAuth],
        ['GET', (p) => `/admin/tasks/${p}`, 'openai', adminAuth],
        ['PUT', (p) => `/admin/orgs/${tenant.org.name}/models/${p}`, 'openai', adminAuth],
        ['DELETE', (p) => `/admin/orgs/${p}/models/${model}`, 'openai', adminAuth],
      ];
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...routes),
          fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 300 }), fc.string({ minLength: 1 })),
          async ([method, route, family, headers], param) => {
            const since = now();
            const path = route(encodeURIComponent(param));
            const res = await send(method, path, method === 'PATCH' ? '{"rpm":5}' : undefined, headers);
            checkShape(res, family, `${method} ${path}`);
            if (res.status >= 300) {
              expect(await writesSince(since, new Set([param]))).toEqual([]);
            }
          },
        ),
        FC_OPTIONS,
      );
    });
  });

  describe('targeted payloads', () => {
    const chatRoutes: [string, Family, () => Record<string, unknown>][] = [
      ['/v1/chat/completions', 'openai', validChat],
      ['/api/chat', 'ollama', validOllama],
    ];

    it('prototype-pollution payloads: 400 invalid_json, nothing written', async () => {
      const inner = '{"polluted":"yes","stream":true,"max_tokens":1,"mode":"network","n":8,"isAdmin":true}';
      for (const [path, family, valid] of chatRoutes) {
        const base = JSON.stringify(valid()).slice(1, -1);
        const payloads = [
          `{${base},"__proto__":${inner}}`,
          `{"__proto__":${inner},${base}}`,
          `{${base},"constructor":{"prototype":${inner}}}`,
          `{${base.replace('"role":"user"', `"role":"user","__proto__":${inner}`)}}`,
          `{${base.replace('"role":"user"', `"role":"user","constructor":{"prototype":${inner}}`)}}`,
          `{${base},"options":{"__proto__":${inner}}}`,
          `{${base},"metadata":{"a":{"b":{"__proto__":${inner}}}}}`,
          `{${base},"\\u005f_proto__":${inner}}`,
        ];
        for (const payload of payloads) {
          const res = await chatCase(path, family, payload, bearer(tenant.key));
          expect({ status: res.status, message: `${payload}: ${res.text}` }).toEqual(
            expect.objectContaining({ status: 400 }),
          );
          if (family === 'openai') {
            assertOpenAIError(res, 400, 'invalid_json');
          }
        }
      }
      for (const [path, body] of [
        ['/admin/orgs', `{"name":"${uniq('p')}","__proto__":${inner}}`],
        ['/admin/models', `{"id":"${uniq('p')}","constructor":{"prototype":${inner}}}`],
        [`/admin/orgs/${patched.org.name}`, `{"__proto__":{"rpm":1}}`],
      ]) {
        const since = now();
        const res = await send(path.startsWith('/admin/orgs/') ? 'PATCH' : 'POST', path, body, adminAuth);
        assertOpenAIError(res, 400, 'invalid_json');
        expect(await writesSince(since, stringsIn(body))).toEqual([]);
      }
    });

    it('unknown top-level fields and options of any name are ignored, never a 5xx or a hang', async () => {
      const failures: string[] = [];
      const names = ['ключ', 'a\nb', 'tab\there', 'emoji 🚂', 'nul\u0000', 'é', 'x'.repeat(300)];
      for (const name of names) {
        // Streamed only for two of them: a hang costs the whole wait (answers take milliseconds here).
        for (const stream of ['ключ', 'a\nb'].includes(name) ? [false, true] : [false]) {
          const openai = { ...validChat(), stream, [name]: 1 };
          const ollama = { ...validOllama(), stream, [name]: 1, options: { [name]: 2 } };
          for (const [path, family, body] of [
            ['/v1/chat/completions', 'openai', openai],
            ['/api/chat', 'ollama', ollama],
          ] as const) {
            await chatCase(path, family, JSON.stringify(body), bearer(tenant.key), 4_000).catch((e: Error) =>
              failures.push(e.message.split('\n').slice(0, 2).join(' ')),
            );
          }
        }
      }
      expect(failures).toEqual([]);
    });

    it('huge and odd numbers: 400 naming the field', async () => {
      const base = JSON.stringify(validChat()).slice(1, -1).replace(',"max_tokens":2', '');
      for (const [field, literal] of [
        ['max_tokens', '1e400'],
        ['max_tokens', '123456789012345678901234567890'],
        ['max_tokens', '9007199254740993'],
        ['max_tokens', '1.0000000000000002'],
        ['temperature', '-1e400'],
        ['temperature', '1e-400'],
        ['n', '1e2'],
        ['top_logprobs', '-0'],
        ['max_completion_tokens', '0'],
      ]) {
        const res = await chatCase(
          '/v1/chat/completions',
          'openai',
          `{${base},"${field}":${literal}}`,
          bearer(tenant.key),
        );
        if (res.status !== 200) {
          assertOpenAIError(res, 400, 'invalid_request');
        }
      }
      for (const literal of ['1e400', '-1', '0', '1.5', '1000000001', '"10"']) {
        const before = await db().organization.findUniqueOrThrow({ where: { id: patched.org.id } });
        const res = await send('PATCH', `/admin/orgs/${patched.org.name}`, `{"rpm":${literal}}`, adminAuth);
        assertOpenAIError(res, 400, 'invalid_request', 'rpm');
        const after = await db().organization.findUniqueOrThrow({ where: { id: patched.org.id } });
        expect(after.rpmLimit).toBe(before.rpmLimit);
      }
    });

    it('NUL characters (which Postgres cannot store) in a model id or a path: 404 or 400, never a 5xx', async () => {
      const chat = await chatCase(
        '/v1/chat/completions',
        'openai',
        JSON.stringify({ ...validChat(), model: 'a\u0000b' }),
        bearer(tenant.key),
      );
      assertOpenAIError(chat, 404, 'model_not_found');
      const ollama = await chatCase(
        '/api/chat',
        'ollama',
        JSON.stringify({ ...validOllama(), model: '\u0000' }),
        bearer(tenant.key),
      );
      expectStatus(ollama, 404);
      const retrieve = await send('GET', '/v1/models/%00x', undefined, bearer(tenant.key));
      checkShape(retrieve, 'openai', 'GET /v1/models/%00x');
      assertOpenAIError(retrieve, 404, 'model_not_found');
      const task = await send('GET', '/v1/tasks/network%3A%00', undefined, bearer(tenant.key));
      checkShape(task, 'openai', 'GET /v1/tasks/network%3A%00');
      expectStatus(task, 404);
    });

    it('invalid UTF-8 in the body: an answer or a 400, never a 5xx', async () => {
      const bad = Buffer.from([
        0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x90, 0x28, 0xbc, 0xed, 0xa0, 0x80,
      ]);
      const wrap = (prefix: string, suffix: string) => Buffer.concat([Buffer.from(prefix), bad, Buffer.from(suffix)]);
      await chatCase(
        '/v1/chat/completions',
        'openai',
        wrap(`{"model":"${model}","max_tokens":2,"messages":[{"role":"user","content":"`, '"}]}'),
        bearer(tenant.key),
      );
      await chatCase('/v1/chat/completions', 'openai', wrap('{"model":"', `","messages":[]}`), bearer(tenant.key));
      await chatCase('/v1/chat/completions', 'openai', Buffer.concat([bad, Buffer.from('{}')]), bearer(tenant.key));
      await chatCase(
        '/api/chat',
        'ollama',
        wrap(`{"model":"${model}","stream":false,"messages":[{"role":"user","content":"`, '"}]}'),
        bearer(tenant.key),
      );
      const since = now();
      const res = await send('POST', '/admin/orgs', wrap('{"name":"', '"}'), adminAuth);
      checkShape(res, 'openai', 'admin with invalid UTF-8');
      assertOpenAIError(res, 400, 'invalid_json');
      expect(res.body.error.message).toMatch(/not valid UTF-8/);
      expect(await writesSince(since, stringsIn(wrap('{"name":"', '"}').toString('utf8')))).toEqual([]);
    });

    it('wrong content types: a JSON body is read as JSON whatever the type; anything else is 400 invalid_json', async () => {
      const xml = '<?xml version="1.0"?><chat><model>m</model></chat>';
      const multipart = '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--x--\r\n';
      for (const [path, family, valid] of chatRoutes) {
        for (const [type, body] of [
          ['text/plain', 'hello'],
          ['application/xml', xml],
          ['multipart/form-data; boundary=x', multipart],
          ['application/x-www-form-urlencoded', 'model=m&messages=hi'],
          ['application/octet-stream', '\u0001\u0002'],
        ]) {
          const res = await chatCase(path, family, body, { ...bearer(tenant.key), 'content-type': type });
          expect({ status: res.status, message: `${type}: ${res.text}` }).toEqual(
            expect.objectContaining({ status: 400 }),
          );
          if (family === 'openai') {
            assertOpenAIError(res, 400, 'invalid_json');
          }
        }
        for (const type of ['text/plain', 'application/xml', 'application/x-www-form-urlencoded']) {
          const res = await chatCase(path, family, JSON.stringify(valid()), {
            ...bearer(tenant.key),
            'content-type': type,
          });
          expect({ status: res.status, message: `${type} with a JSON body: ${res.text}` }).toEqual(
            expect.objectContaining({ status: 200 }),
          );
        }
      }
      const res = await send('POST', '/admin/orgs', multipart, {
        ...adminAuth,
        'content-type': 'multipart/form-data; boundary=x',
      });
      assertOpenAIError(res, 400, 'invalid_json');
    });

    it('an empty body: 400 in the route family shape, nothing written', async () => {
      for (const [path, family] of chatRoutes) {
        for (const headers of [{}, { 'content-type': 'text/plain' }] as Record<string, string>[]) {
          const res = await chatCase(path, family, '', { ...bearer(tenant.key), ...headers });
          expectStatus(res, 400);
        }
        const spaces = await chatCase(path, family, '   \n ', bearer(tenant.key));
        expect(spaces.status).toBe(400);
      }
      for (const [method, path] of [
        ['POST', '/admin/orgs'],
        ['POST', '/admin/models'],
      ]) {
        const since = now();
        const res = await send(method, path, '', adminAuth);
        assertOpenAIError(res, 400, 'invalid_request');
        // An empty body names nothing: any organization or model created now would be its doing.
        const created = await Promise.all([
          db().organization.count({ where: { createdAt: { gte: since }, name: '' } }),
          db().model.count({ where: { createdAt: { gte: since }, id: '' } }),
        ]);
        expect(created).toEqual([0, 0]);
      }
    });

    it('10k-deep nesting (and far deeper, up to the body limit): a 400 or an ignored field, never a 5xx', async () => {
      const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
      const deepObject = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
      const failures: string[] = [];
      const record = (what: string) => (e: Error) => failures.push(`${what}: ${e.message.split('\n').slice(-1)[0]}`);
      const base = JSON.stringify(validChat()).slice(1, -1);
      const ollamaBase = JSON.stringify(validOllama()).slice(1, -1);
      for (const n of [10_000, 500_000]) {
        for (const [kind, nested] of [
          ['arrays', deep(n)],
          ['objects', deepObject(Math.floor(n / 5))],
        ]) {
          const cases: [string, string, Family, string][] = [
            ['the whole body', '/v1/chat/completions', 'openai', nested],
            ['an unknown field', '/v1/chat/completions', 'openai', `{${base},"x":${nested}}`],
            ['messages', '/v1/chat/completions', 'openai', `{"model":"${model}","messages":${nested}}`],
            [
              'tool parameters',
              '/v1/chat/completions',
              'openai',
              `{${base},"tools":[{"type":"function","function":{"name":"f","parameters":{"p":${nested}}}}]}`,
            ],
            [
              'a JSON schema',
              '/v1/chat/completions',
              'openai',
              `{${base},"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"p":${nested}}}}}`,
            ],
            ['Ollama messages', '/api/chat', 'ollama', `{"model":"${model}","stream":false,"messages":${nested}}`],
            ['an Ollama format', '/api/chat', 'ollama', `{${ollamaBase},"format":{"p":${nested}}}`],
          ];
          for (const [where, path, family, body] of cases) {
            await chatCase(path, family, body, bearer(tenant.key)).catch(record(`${n} nested ${kind} in ${where}`));
          }
          const since = now();
          for (const [path, body] of [
            ['/admin/orgs', `{"name":${nested}}`],
            ['/admin/models', nested],
          ]) {
            try {
              checkShape(await send('POST', path, body, adminAuth), 'openai', `${n} nested ${kind} to ${path}`);
            } catch (e) {
              record(`${n} nested ${kind} to ${path}`)(e as Error);
            }
          }
          expect(await writesSince(since, stringsIn(nested))).toEqual([]);
        }
      }
      expect(failures).toEqual([]);
    });
  });

  it('after all that, Object.prototype is clean: a plain request behaves as a plain request', async () => {
    // the test process itself
    expect(({} as any).polluted).toBeUndefined();
    const res = await send(
      'POST',
      '/v1/chat/completions',
      JSON.stringify({ model, messages: [{ role: 'user', content: 'plain' }] }),
      bearer(tenant.key),
    );
    expectStatus(res, 200);
    // not streamed
    expect(String(res.headers['content-type'])).toMatch(/^application\/json/);
    expect(res.body.object).toBe('chat.completion');
    // n stays 1
    expect(res.body.choices).toHaveLength(1);
    // The org's own device is online, so `auto` picks direct; a polluted `mode: network` would not.
    expect(res.body.mode).toBe('direct');
    // a polluted max_tokens of 1 would cut the answer
    expect(res.body.usage.completion_tokens).toBe(2);
    expect(res.body.polluted).toBeUndefined();
    expect(res.headers['x-switchyard-ignored-params']).toBeUndefined();
    const admin = await send('GET', '/admin/orgs', undefined, { authorization: 'Bearer nope-nope-nope-nope' });
    assertOpenAIError(admin, 401, 'invalid_admin_token');
  });
});
