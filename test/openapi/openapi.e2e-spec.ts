import { randomUUID } from 'node:crypto';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { createDevice, createTenant, db, http, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { adminAuth, bearer, httpFrom, loopbackAddress } from '../foundation/helpers';
import { MESSAGES, Relay } from '../relay-api/helpers';
import { validateOpenApiDocument } from './validate-document';
import { expectStatus } from '../support/expect-status';

/** What a check saw: every documented route that real answers were checked against, by status. */
const checked = new Map<string, Set<number>>();

/**
 * GET /openapi.json: a valid OpenAPI 3.1 document, and real answers of the api (successes and errors,
 * public, tenant and admin routes) that match the schemas it gives for them.
 */
describe('OpenAPI document', () => {
  const relay = new Relay();
  let tenant: Tenant;
  let doc: any;
  let ajv: Ajv2020;
  /** A real task's address (the tenant test's completion), for the admin's task route. */
  let taskAddress = '';
  const model = `${uniq('openapi')}/Doc-Model:Q4_0`;
  const embedModel = uniq('openapi-embed');

  /** Validates a real answer against the document's schema for (method, path template, status). */
  function conforms(method: string, template: string, res: { status: number; body: unknown; text: string }) {
    const operation = doc.paths[template]?.[method.toLowerCase()];
    expect({ ok: Boolean(operation), message: `${method} ${template} is not in the document` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const response = operation.responses[String(res.status)];
    expect({
      ok: Boolean(response),
      message: `${method} ${template} answered ${res.status}, which the document does not list: ${res.text}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    const schema = response.content?.['application/json']?.schema;
    expect({
      ok: Boolean(schema?.$ref),
      message: `${method} ${template} ${res.status} has no JSON schema in the document`,
    }).toEqual(expect.objectContaining({ ok: true }));
    const validate = ajv.getSchema(`openapi.json${schema.$ref}`) ?? ajv.compile({ $ref: `openapi.json${schema.$ref}` });
    const ok = validate(res.body);
    expect({
      ok: Boolean(ok),
      message: `${method} ${template} ${res.status} does not match ${schema.$ref}: ${ajv.errorsText(validate.errors)}\n${res.text}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    const seen = checked.get(`${method} ${template}`) ?? new Set<number>();
    seen.add(res.status);
    checked.set(`${method} ${template}`, seen);
  }

  const call = async (
    method: string,
    template: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string> } = {},
  ) => {
    const res = await http(method, `${relay.api.url}${path}`, opts);
    conforms(method, template, res);
    return res;
  };
  const asAdmin = (method: string, template: string, path: string, body?: unknown) =>
    call(method, template, path, { body, headers: adminAuth() });
  const asTenant = (method: string, template: string, path: string, body?: unknown) =>
    call(method, template, path, { body, headers: bearer(tenant.key) });

  beforeAll(async () => {
    await relay.start();
    await db().model.create({ data: { id: embedModel, network: true, kind: 'embedding' } });
    tenant = await createTenant([model, embedModel]);
    const device = await createDevice();
    await relay.device(device.token, { models: [model, embedModel], tokens: 5 });
    const res = await http('GET', `${relay.api.url}/openapi.json`);
    expectStatus(res, 200);
    doc = res.body;
    ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema(doc, 'openapi.json');
  });

  afterAll(() => relay.stop());

  test('GET /openapi.json needs no credentials and is a valid OpenAPI 3.1 document', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const result = await validateOpenApiDocument(doc);
    expect({ ok: result.valid, errors: result.errors }).toEqual(expect.objectContaining({ ok: true }));
    // Request schemas come from the validating zod schemas: a field the chat DTO knows is there.
    const chat = doc.paths['/v1/chat/completions'].post.requestBody.content['application/json'].schema;
    expect(Object.keys(chat.properties)).toEqual(expect.arrayContaining(['model', 'messages', 'temperature', 'tools']));
    expect(chat.required).toEqual(['messages']);
    const usage = doc.paths['/v1/usage'].get.parameters.map((p: any) => [p.name, p.in, p.required]);
    expect(usage).toEqual([
      ['from', 'query', false],
      ['to', 'query', false],
      ['group_by', 'query', false],
    ]);
  });

  test('embeddings routes: real answers match the documented schemas', async () => {
    for (const path of ['/v1/embeddings', '/openai/v1/embeddings']) {
      expectStatus(await asTenant('POST', path, path, { model: embedModel, input: ['a', 'b'] }), 200);
      const floats = await asTenant('POST', path, path, { model: embedModel, input: 'a', encoding_format: 'float' });
      expectStatus(floats, 200);
      expectStatus(await asTenant('POST', path, path, { model: embedModel, input: '' }), 400);
      expectStatus(await asTenant('POST', path, path, { model, input: 'a' }), 400);
    }
    for (const path of ['/api/embed', '/v2/ollama/api/embed']) {
      expectStatus(await asTenant('POST', path, path, { model: embedModel, input: ['a', 'b'] }), 200);
      expectStatus(await asTenant('POST', path, path, { model: embedModel, input: 7 }), 400);
    }
    for (const path of ['/api/embeddings', '/v2/ollama/api/embeddings']) {
      expectStatus(await asTenant('POST', path, path, { model: embedModel, prompt: 'a' }), 200);
      expectStatus(await asTenant('POST', path, path, { model: 'no-such-model', prompt: 'a' }), 404);
    }
  });

  test('tenant routes: real answers match the documented schemas', async () => {
    await call('GET', '/healthz', '/healthz');
    await call('GET', '/readyz', '/readyz');
    await call('GET', '/api/version', '/api/version');
    await asTenant('GET', '/v1/models', '/v1/models');
    await asTenant('GET', '/v1/models/{model}', `/v1/models/${model.replaceAll('/', '%2F')}`);
    await asTenant('GET', '/v1/models/{model}', '/v1/models/no-such-model');
    const completion = await asTenant('POST', '/v1/chat/completions', '/v1/chat/completions', {
      model,
      messages: MESSAGES,
    });
    expectStatus(completion, 200);
    taskAddress = completion.body.task_address;
    await asTenant('POST', '/v1/chat/completions', '/v1/chat/completions', { model, messages: [] });
    // Nodea's base path answers as /v1 does: the same bodies, the same errors.
    const aliased = await asTenant('POST', '/openai/v1/chat/completions', '/openai/v1/chat/completions', {
      model,
      messages: MESSAGES,
    });
    expectStatus(aliased, 200);
    expect(aliased.body.choices[0].message.content).toBe(completion.body.choices[0].message.content);
    await asTenant('POST', '/openai/v1/chat/completions', '/openai/v1/chat/completions', { model, messages: [] });
    const models = await asTenant('GET', '/openai/v1/models', '/openai/v1/models');
    expect(models.body).toEqual((await asTenant('GET', '/v1/models', '/v1/models')).body);
    await asTenant('GET', '/openai/v1/models/{model}', `/openai/v1/models/${model.replaceAll('/', '%2F')}`);
    const missing = await asTenant('GET', '/openai/v1/models/{model}', '/openai/v1/models/no-such-model');
    expect(missing.body).toEqual((await asTenant('GET', '/v1/models/{model}', '/v1/models/no-such-model')).body);
    await asTenant('GET', '/v1/tasks/{address}', `/v1/tasks/${completion.body.task_address}`);
    await asTenant('GET', '/v1/tasks/{address}', `/v1/tasks/network:${randomUUID()}`);
    await asTenant('GET', '/v1/usage', '/v1/usage?group_by=model,key,day,hour,mode,kind,status');
    await asTenant('GET', '/v1/usage', '/v1/usage?group_by=region');
    const ollama = await asTenant('POST', '/api/chat', '/api/chat', { model, messages: MESSAGES });
    expectStatus(ollama, 200);
    await asTenant('POST', '/api/chat', '/api/chat', { model, messages: 'hello' });
    await asTenant('GET', '/api/tags', '/api/tags');
    const show = await asTenant('POST', '/api/show', '/api/show', { model });
    expectStatus(show, 200);
    await asTenant('POST', '/api/show', '/api/show', { model: 'no-such-model' });
    await asTenant('POST', '/api/show', '/api/show', {});
    const ps = await asTenant('GET', '/api/ps', '/api/ps');
    expect(ps.body.models.map((m: { name: string }) => m.name).sort()).toEqual([model, embedModel].sort());
    const alias = await asTenant('POST', '/v2/ollama/api/chat', '/v2/ollama/api/chat', { model, messages: MESSAGES });
    expectStatus(alias, 200);
    await asTenant('POST', '/v2/ollama/api/chat', '/v2/ollama/api/chat', { model, messages: 'hello' });
    // The vLLM path serves direct mode only: this tenant has no device of its own, so only its refusals.
    await asTenant('POST', '/v2/vllm/v1/chat/completions', '/v2/vllm/v1/chat/completions', { model, messages: [] });
    await asTenant('POST', '/v2/vllm/v1/chat/completions', '/v2/vllm/v1/chat/completions', {
      model,
      messages: MESSAGES,
      mode: 'network',
    });
    const unauthorized = await httpFrom(loopbackAddress(), 'GET', `${relay.api.url}/v1/usage`);
    conforms('GET', '/v1/usage', unauthorized);
  });

  test('admin routes: real answers match the documented schemas', async () => {
    const name = uniq('openapi-org');
    await asAdmin('POST', '/admin/orgs', '/admin/orgs', { name });
    await asAdmin('POST', '/admin/orgs', '/admin/orgs', { name });
    await asAdmin('GET', '/admin/orgs', '/admin/orgs');
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { rpm: 60, concurrency: null });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { network: false, weight: 2 });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { resume: false });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { resume: 'yes' });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { compat: 'nodea' });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { compat: 'Nodea' });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { weight: 0 });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { monthly_token_budget: 2_000_000 });
    await asAdmin('PATCH', '/admin/orgs/{org}', `/admin/orgs/${name}`, { monthly_token_budget: -1 });
    const key = await asAdmin('POST', '/admin/orgs/{org}/keys', `/admin/orgs/${name}/keys`, { label: 'doc' });
    await asAdmin('PATCH', '/admin/keys/{id}', `/admin/keys/${key.body.id}`, { monthly_token_budget: 500_000 });
    await asAdmin('PATCH', '/admin/keys/{id}', `/admin/keys/${key.body.id}`, { monthly_token_budget: 1.5 });
    await asAdmin('PATCH', '/admin/keys/{id}', `/admin/keys/${randomUUID()}`, { monthly_token_budget: null });
    const rotated = await asAdmin('POST', '/admin/keys/{id}/rotate', `/admin/keys/${key.body.id}/rotate`, {
      grace: '1h',
    });
    expectStatus(rotated, 201);
    await asAdmin('POST', '/admin/keys/{id}/rotate', `/admin/keys/${key.body.id}/rotate`);
    await asAdmin('GET', '/admin/orgs/{org}/keys', `/admin/orgs/${name}/keys`);
    await asAdmin('DELETE', '/admin/keys/{id}', `/admin/keys/${rotated.body.id}`);
    await asAdmin('DELETE', '/admin/keys/{id}', `/admin/keys/${randomUUID()}`);
    const id = `${uniq('openapi-vendor')}/Model:Q8_0`;
    await asAdmin('POST', '/admin/models', '/admin/models', { id, max_output_tokens: 100 });
    await asAdmin('POST', '/admin/models', '/admin/models', { id: 'has space' });
    await asAdmin('POST', '/admin/models', '/admin/models', { id: `${uniq('openapi-embed')}:v1`, kind: 'embedding' });
    await asAdmin('POST', '/admin/models', '/admin/models', { id: uniq('openapi-kind'), kind: 'Embedding' });
    await asAdmin('GET', '/admin/models', '/admin/models');
    await asAdmin('PATCH', '/admin/models/{model}', `/admin/models/${encodeURIComponent(id)}`, { network: true });
    await asAdmin('PATCH', '/admin/models/{model}', `/admin/models/${encodeURIComponent(id)}`, { network: 'yes' });
    await asAdmin('PATCH', '/admin/models/{model}', `/admin/models/${encodeURIComponent(id)}`, { kind: 'chat' });
    await asAdmin('PATCH', '/admin/models/{model}', `/admin/models/${encodeURIComponent(id)}`, { kind: null });
    await asAdmin('PATCH', '/admin/models/{model}', `/admin/models/${uniq('nope')}`, { network: false });
    const canaries = `/admin/models/${encodeURIComponent(id)}/canaries`;
    const canary = await asAdmin('POST', '/admin/models/{model}/canaries', canaries, {
      messages: [{ role: 'user', content: 'Say yes.' }],
      max_tokens: 4,
      expect: { contains: 'yes' },
    });
    await asAdmin('POST', '/admin/models/{model}/canaries', canaries, { messages: [], max_tokens: 4, expect: {} });
    await asAdmin('GET', '/admin/models/{model}/canaries', canaries);
    await asAdmin('GET', '/admin/models/{model}/canaries', `/admin/models/${uniq('nope')}/canaries`);
    await asAdmin('DELETE', '/admin/canaries/{id}', `/admin/canaries/${canary.body.id}`);
    await asAdmin('DELETE', '/admin/canaries/{id}', `/admin/canaries/${canary.body.id}`);
    const path = `/admin/orgs/${name}/models/${id.replaceAll('/', '%2F')}`;
    await asAdmin('PUT', '/admin/orgs/{org}/models/{model}', path);
    await asAdmin('DELETE', '/admin/orgs/{org}/models/{model}', path);
    const device = await asAdmin('POST', '/admin/devices', '/admin/devices', { name: 'doc-device', org: name });
    await asAdmin('GET', '/admin/devices', '/admin/devices');
    await asAdmin('GET', '/admin/devices/{id}', `/admin/devices/${device.body.id}`);
    await asAdmin('GET', '/admin/devices/{id}', `/admin/devices/${randomUUID()}`);
    const queues = await asAdmin('GET', '/admin/queues', '/admin/queues');
    expect({ ok: queues.body.data.some((q: { model: string }) => q.model === model), body: queues.text }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    await asAdmin('PATCH', '/admin/devices/{id}', `/admin/devices/${device.body.id}`, { models: [model] });
    await asAdmin('PATCH', '/admin/devices/{id}', `/admin/devices/${device.body.id}`, { models: null });
    await asAdmin('PATCH', '/admin/devices/{id}', `/admin/devices/${device.body.id}`, { models: [] });
    await asAdmin('PATCH', '/admin/devices/{id}', `/admin/devices/${randomUUID()}`, { models: null });
    await asAdmin('DELETE', '/admin/devices/{id}', `/admin/devices/${device.body.id}`);
    await asAdmin('GET', '/admin/tasks/{address}', `/admin/tasks/${taskAddress}`);
    await asAdmin('GET', '/admin/tasks/{address}', `/admin/tasks/network:${randomUUID()}`);
    await asAdmin('GET', '/admin/usage', '/admin/usage?group_by=org,model');
    await asAdmin('GET', '/admin/usage', `/admin/usage?org=${uniq('nobody')}`);
    // The audit log holds the changes above: a page of them, and a refused filter.
    const audit = await asAdmin('GET', '/admin/audit', '/admin/audit?kind=org&limit=2');
    expect({ ok: audit.body.data.length === 2 && audit.body.has_more, body: audit.text }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    await asAdmin('GET', '/admin/audit', `/admin/audit?since=2026-12-01&after=${audit.body.last_id}`);
    await asAdmin('GET', '/admin/audit', '/admin/audit?kind=org.delete');
    const traffic = await asAdmin('GET', '/admin/traffic', '/admin/traffic');
    expect({ ok: traffic.body.minutes.length > 0, body: traffic.text }).toEqual(expect.objectContaining({ ok: true }));
    await call('GET', '/dashboard/session', '/dashboard/session');
    await call('POST', '/dashboard/session', '/dashboard/session', { body: { token: 1 } });
    await call('GET', '/dashboard/assets/{file}', '/dashboard/assets/nothing.js');
    const denied = await http('GET', `${relay.api.url}/admin/orgs`);
    conforms('GET', '/admin/orgs', denied);
  });

  test('every documented route was checked against a real answer', () => {
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops as object).map((method) => `${method.toUpperCase()} ${path}`),
    );
    // /metrics answers text and /openapi.json this document: not JSON bodies with a schema to check.
    const missing = documented.filter(
      (r) =>
        !checked.has(r) &&
        ![
          'GET /metrics',
          'GET /openapi.json',
          // The dashboard's page and assets, and the session's 204s: no JSON body (see test/dashboard).
          'GET /dashboard',
          'DELETE /dashboard/session',
        ].includes(r),
    );
    expect(missing).toEqual([]);
  });
});
