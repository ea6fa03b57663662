import { ROUTES } from '../../../apps/api/src/openapi/routes';
import { closeDb, http } from '../../support/stack';
import { startApiApp } from '../support/apps';
import type { InProcessApp } from '../support/apps';
import { apiRoutes } from '../support/routes';

/** The OpenAPI document and the application: the same routes, with the same access. */
describe('OpenAPI document (api)', () => {
  let api: InProcessApp;

  beforeAll(async () => {
    api = await startApiApp();
  });

  afterAll(async () => {
    await api?.close();
    await closeDb();
  });

  it('documents every route of the application, and no other, with its access', async () => {
    // Nest writes `:param`, OpenAPI `{param}`.
    const served = apiRoutes(api.app)
      .map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}')} ${r.access}`)
      .sort();
    const documented = ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path} ${r.auth}`).sort();
    expect(documented).toEqual(served);
    const res = await http('GET', `${api.url}/openapi.json`);
    expect(res.status).toBe(200);
    const paths = Object.entries(res.body.paths as Record<string, object>).flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`),
    );
    expect(paths.sort()).toEqual(ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path}`).sort());
  });
});
