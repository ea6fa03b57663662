import OpenAI from 'openai';
import { AdminService } from '@app/common';
import { closeDb, createTenant, db, http, startApi, uniq } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import { adminAuth, assertOpenAIError, bearer, modelPath, unknownKey, stopApis } from './helpers';
import { expectStatus } from '../support/expect-status';

/** GET /v1/models and /v1/models/{model}: only what the caller's org has enabled; unknown_url elsewhere. */
describe('models API', () => {
  let api: Api;
  let acme: Tenant;
  let globex: Tenant;
  // Catalog ids as real catalogs spell them: with `/` and `:`.
  const slashModel = `${uniq('bartowski')}/Llama-3.2-3B-Instruct-GGUF:Q4_K_M`;
  const colonModel = `${uniq('llama3.2')}:3b`;
  const ownedModel = uniq('owned-model');
  const globexModel = `${uniq('globex')}/Private-7B`;
  /** In the catalog but enabled for no organization. */
  const orphanModel = uniq('orphan-model');

  const get = (path: string, key: string) => http('GET', `${api.url}${path}`, { headers: bearer(key) });
  const ids = (body: { data: { id: string }[] }) => body.data.map((m) => m.id).sort();

  beforeAll(async () => {
    const admin = new AdminService(db());
    await admin.addModel({ id: ownedModel, ownedBy: 'acme-labs' });
    await admin.addModel({ id: orphanModel });
    [acme, globex] = await Promise.all([
      createTenant([slashModel, colonModel, ownedModel]),
      createTenant([globexModel]),
    ]);
    api = await startApi();
  });

  afterAll(async () => {
    await stopApis(api);
    await closeDb();
  });

  test('GET /v1/models lists exactly the models enabled for the caller’s org', async () => {
    const res = await get('/v1/models', acme.key);
    expectStatus(res, 200);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'object']);
    expect(res.body.object).toBe('list');
    expect(ids(res.body)).toEqual([slashModel, colonModel, ownedModel].sort());
    const now = Date.now() / 1000;
    for (const model of res.body.data) {
      expect(Object.keys(model).sort()).toEqual(['created', 'id', 'object', 'owned_by']);
      expect(model.object).toBe('model');
      expect({
        ok: Number.isInteger(model.created),
        message: `created is not integer seconds: ${model.created}`,
      }).toEqual(expect.objectContaining({ ok: true }));
      expect({
        ok: model.created > now - 3600 && model.created <= now + 5,
        message: `created ${model.created} is not recent`,
      }).toEqual(expect.objectContaining({ ok: true }));
      expect(typeof model.owned_by).toBe('string');
    }
    const byId = Object.fromEntries(res.body.data.map((m: { id: string; owned_by: string }) => [m.id, m.owned_by]));
    expect(byId[ownedModel]).toBe('acme-labs');
    expect(byId[colonModel]).toBe('switchyard');

    const other = await get('/v1/models', globex.key);
    expectStatus(other, 200);
    expect(ids(other.body)).toEqual([globexModel]);

    const empty = await createTenant([]);
    const none = await get('/v1/models', empty.key);
    expectStatus(none, 200);
    expect(none.body).toEqual({ object: 'list', data: [] });
  });

  test('GET /v1/models/{model} returns one model, with / sent as %2F and : as is', async () => {
    const list = (await get('/v1/models', acme.key)).body.data as { id: string }[];
    for (const id of [slashModel, colonModel, ownedModel]) {
      const res = await get(`/v1/models/${modelPath(id)}`, acme.key);
      expect({ status: res.status, message: `${id}: ${res.text}` }).toEqual(expect.objectContaining({ status: 200 }));
      expect(res.body).toEqual(list.find((m) => m.id === id));
    }
    expect(modelPath(slashModel)).toContain('%2F');
    expect(modelPath(slashModel)).toContain(':');
    // Fully percent-encoded (as encodeURIComponent does) is the same model.
    const encoded = await get(`/v1/models/${encodeURIComponent(slashModel)}`, acme.key);
    expectStatus(encoded, 200);
    expect(encoded.body.id).toBe(slashModel);
  });

  test('a model of another org is indistinguishable from a missing one (404 model_not_found)', async () => {
    const missingId = `${uniq('missing')}/Nothing:Q8_0`;
    const missing = await get(`/v1/models/${modelPath(missingId)}`, acme.key);
    const missingError = assertOpenAIError(missing, 404, 'model_not_found');
    const cases = {
      "another org's model": globexModel,
      'a model enabled for no org': orphanModel,
    };
    for (const [name, id] of Object.entries(cases)) {
      const res = await get(`/v1/models/${modelPath(id)}`, acme.key);
      const error = assertOpenAIError(res, 404, 'model_not_found');
      expect({ type: error.type, name }).toEqual(expect.objectContaining({ type: missingError.type }));
      expect({ param: error.param, name }).toEqual(expect.objectContaining({ param: missingError.param }));
      // Only the id in the message may differ.
      expect({ actual: error.message.replaceAll(id, '<id>'), name }).toEqual(
        expect.objectContaining({ actual: missingError.message.replaceAll(missingId, '<id>') }),
      );
      expect(res.headers.get('content-type')).toBe(missing.headers.get('content-type'));
    }
    // The owner still sees its model.
    expect((await get(`/v1/models/${modelPath(globexModel)}`, globex.key)).status).toBe(200);
  });

  test('disabling a model removes it from both endpoints; enabling brings it back', async () => {
    const tenant = await createTenant([slashModel, colonModel]);
    const path = (id: string) => `${api.url}/admin/orgs/${tenant.org.name}/models/${modelPath(id)}`;
    const disabled = await http('DELETE', path(slashModel), { headers: adminAuth() });
    expectStatus(disabled, 200);

    const list = await get('/v1/models', tenant.key);
    expect(ids(list.body)).toEqual([colonModel]);
    assertOpenAIError(await get(`/v1/models/${modelPath(slashModel)}`, tenant.key), 404, 'model_not_found');
    // Other orgs keep it.
    expect((await get(`/v1/models/${modelPath(slashModel)}`, acme.key)).status).toBe(200);

    const enabled = await http('PUT', path(slashModel), { headers: adminAuth() });
    expectStatus(enabled, 200);
    expect(ids((await get('/v1/models', tenant.key)).body)).toEqual([slashModel, colonModel].sort());
    expect((await get(`/v1/models/${modelPath(slashModel)}`, tenant.key)).status).toBe(200);
  });

  test('the official openai client lists and retrieves models', async () => {
    const client = new OpenAI({ apiKey: acme.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    const seen: string[] = [];
    for await (const model of client.models.list()) {
      expect(model.object).toBe('model');
      seen.push(model.id);
    }
    expect(seen.sort()).toEqual([slashModel, colonModel, ownedModel].sort());

    const one = await client.models.retrieve(slashModel);
    expect(one.id).toBe(slashModel);
    expect(one.object).toBe('model');
    expect(typeof one.created).toBe('number');
    expect((await client.models.retrieve(colonModel)).id).toBe(colonModel);

    const foreign = client.models.retrieve(globexModel);
    await expect(foreign).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(foreign).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    const stranger = new OpenAI({ apiKey: unknownKey(), baseURL: `${api.url}/v1`, maxRetries: 0 });
    const refused = stranger.models.list();
    await expect(refused).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expect(refused).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
  });

  test('any other path is 404 unknown_url in the OpenAI error shape', async () => {
    const cases: [string, string, Record<string, string>][] = [
      ['GET', '/v2/x', {}],
      ['GET', '/v2/x', bearer(acme.key)],
      ['POST', '/v1/nothing', {}],
      ['POST', '/v1/nothing', bearer(acme.key)],
      ['DELETE', '/v1/models', bearer(acme.key)],
      ['GET', '/', {}],
    ];
    for (const [method, path, headers] of cases) {
      const res = await http(method, `${api.url}${path}`, { headers });
      const error = assertOpenAIError(res, 404, 'unknown_url', null);
      expect({ type: error.type, message: `${method} ${path}` }).toEqual(
        expect.objectContaining({ type: 'invalid_request_error' }),
      );
    }
  });
});
