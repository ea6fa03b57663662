import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { AdminService } from '@app/common';
import { closeDb, createTenant, db, http, startApi, uniq } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import { adminAuth, assertOpenAIError, bearer, modelPath, unknownKey, stopApis } from './helpers';

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
    assert.equal(res.status, 200, res.text);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'object']);
    assert.equal(res.body.object, 'list');
    expect(ids(res.body)).toEqual([slashModel, colonModel, ownedModel].sort());
    const now = Date.now() / 1000;
    for (const model of res.body.data) {
      expect(Object.keys(model).sort()).toEqual(['created', 'id', 'object', 'owned_by']);
      assert.equal(model.object, 'model');
      assert.ok(Number.isInteger(model.created), `created is not integer seconds: ${model.created}`);
      assert.ok(model.created > now - 3600 && model.created <= now + 5, `created ${model.created} is not recent`);
      assert.equal(typeof model.owned_by, 'string');
    }
    const byId = Object.fromEntries(res.body.data.map((m: { id: string; owned_by: string }) => [m.id, m.owned_by]));
    assert.equal(byId[ownedModel], 'acme-labs');
    assert.equal(byId[colonModel], 'switchyard');

    const other = await get('/v1/models', globex.key);
    assert.equal(other.status, 200, other.text);
    expect(ids(other.body)).toEqual([globexModel]);

    const empty = await createTenant([]);
    const none = await get('/v1/models', empty.key);
    assert.equal(none.status, 200, none.text);
    expect(none.body).toEqual({ object: 'list', data: [] });
  });

  test('GET /v1/models/{model} returns one model, with / sent as %2F and : as is', async () => {
    const list = (await get('/v1/models', acme.key)).body.data as { id: string }[];
    for (const id of [slashModel, colonModel, ownedModel]) {
      const res = await get(`/v1/models/${modelPath(id)}`, acme.key);
      assert.equal(res.status, 200, `${id}: ${res.text}`);
      expect(res.body).toEqual(list.find((m) => m.id === id));
    }
    assert.ok(modelPath(slashModel).includes('%2F') && modelPath(slashModel).includes(':'));
    // Fully percent-encoded (as encodeURIComponent does) is the same model.
    const encoded = await get(`/v1/models/${encodeURIComponent(slashModel)}`, acme.key);
    assert.equal(encoded.status, 200, encoded.text);
    assert.equal(encoded.body.id, slashModel);
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
      assert.equal(error.type, missingError.type, name);
      assert.equal(error.param, missingError.param, name);
      // Only the id in the message may differ.
      assert.equal(error.message.replaceAll(id, '<id>'), missingError.message.replaceAll(missingId, '<id>'), name);
      assert.equal(res.headers.get('content-type'), missing.headers.get('content-type'));
    }
    // The owner still sees its model.
    assert.equal((await get(`/v1/models/${modelPath(globexModel)}`, globex.key)).status, 200);
  });

  test('disabling a model removes it from both endpoints; enabling brings it back', async () => {
    const tenant = await createTenant([slashModel, colonModel]);
    const path = (id: string) => `${api.url}/admin/orgs/${tenant.org.name}/models/${modelPath(id)}`;
    const disabled = await http('DELETE', path(slashModel), { headers: adminAuth() });
    assert.equal(disabled.status, 200, disabled.text);

    const list = await get('/v1/models', tenant.key);
    expect(ids(list.body)).toEqual([colonModel]);
    assertOpenAIError(await get(`/v1/models/${modelPath(slashModel)}`, tenant.key), 404, 'model_not_found');
    // Other orgs keep it.
    assert.equal((await get(`/v1/models/${modelPath(slashModel)}`, acme.key)).status, 200);

    const enabled = await http('PUT', path(slashModel), { headers: adminAuth() });
    assert.equal(enabled.status, 200, enabled.text);
    expect(ids((await get('/v1/models', tenant.key)).body)).toEqual([slashModel, colonModel].sort());
    assert.equal((await get(`/v1/models/${modelPath(slashModel)}`, tenant.key)).status, 200);
  });

  test('the official openai client lists and retrieves models', async () => {
    const client = new OpenAI({ apiKey: acme.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    const seen: string[] = [];
    for await (const model of client.models.list()) {
      assert.equal(model.object, 'model');
      seen.push(model.id);
    }
    expect(seen.sort()).toEqual([slashModel, colonModel, ownedModel].sort());

    const one = await client.models.retrieve(slashModel);
    assert.equal(one.id, slashModel);
    assert.equal(one.object, 'model');
    assert.equal(typeof one.created, 'number');
    assert.equal((await client.models.retrieve(colonModel)).id, colonModel);

    await assert.rejects(client.models.retrieve(globexModel), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal(error.status, 404);
      assert.equal(error.code, 'model_not_found');
      return true;
    });
    const stranger = new OpenAI({ apiKey: unknownKey(), baseURL: `${api.url}/v1`, maxRetries: 0 });
    await assert.rejects(stranger.models.list(), (error: unknown) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
      assert.equal(error.status, 401);
      assert.equal(error.code, 'invalid_api_key');
      return true;
    });
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
      assert.equal(error.type, 'invalid_request_error', `${method} ${path}`);
    }
  });
});
