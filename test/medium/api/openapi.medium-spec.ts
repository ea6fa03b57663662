import { closeDb, http } from '../../support/stack';
import { startApiApp } from '../support/apps';
import type { InProcessApp } from '../support/apps';
import { apiRoutes } from '../support/routes';

/** The access a documented operation requires, read back from its `security`. */
function accessOf(security: Array<Record<string, unknown>>): string {
  const schemes = security.flatMap((s) => Object.keys(s)).sort();
  if (schemes.length === 0) {
    return 'public';
  }
  return schemes.includes('adminToken') ? 'admin' : 'api_key';
}

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
    const res = await http('GET', `${api.url}/openapi.json`);
    expect(res.status).toBe(200);
    const documented = Object.entries(
      res.body.paths as Record<string, Record<string, { security: Array<Record<string, unknown>> }>>,
    )
      .flatMap(([path, ops]) =>
        Object.entries(ops).map(([method, op]) => `${method.toUpperCase()} ${path} ${accessOf(op.security)}`),
      )
      .sort();
    expect(documented).toEqual(served);
  });
});
