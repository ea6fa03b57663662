import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import {
  ADMIN_TOKEN,
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  startApi,
  startDevice,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { launchChromium } from './browser';
import { projectPath } from '../../libs/common/src/paths/project-root';
import { expectStatus } from '../support/expect-status';

/** Where the run writes a screenshot of each view (the README names it, and shows one). */
export const SCREENSHOTS = projectPath('test-results/dashboard');

/**
 * The operators' dashboard in a real browser (issue 19): Debian's chromium driven by playwright-core,
 * against a real api, dispatcher and sim device.
 */
describe('dashboard in a browser', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let device: Proc;
  let deviceName: string;
  let deviceId: string;
  let tenant: Tenant;
  let browser: Browser;
  let page: Page;
  const model = uniq('dash-model');
  const consoleErrors: string[] = [];

  const view = (name: string) => page.locator(`[data-testid="view-${name}"]`);
  const open = async (name: string) => {
    await page.getByRole('button', { name, exact: true }).click();
    await view(name).waitFor();
  };
  const shot = (name: string) => page.screenshot({ path: `${SCREENSHOTS}/${name}.png`, fullPage: true });

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    tenant = await createTenant([model]);
    api = await startApi();
    dispatcher = await startDispatcher();
    const registered = await createDevice();
    deviceId = registered.id;
    deviceName = (
      await http('GET', `${api.url}/admin/devices/${registered.id}`, {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      })
    ).body.name;
    device = await startDevice(dispatcher, registered.token, { models: [model], tokens: 6, features: ['tools'] });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on('console', (msg) => {
      if (msg.type() === 'error') {
        consoleErrors.push(msg.text());
      }
    });
    page.on('pageerror', (error) => consoleErrors.push(error.message));
  });

  afterAll(async () => {
    await browser?.close();
    await device?.stop();
    await dispatcher?.stop();
    await api?.stop();
    await closeDb();
  });

  test('a wrong token is refused at sign-in', async () => {
    await page.goto(`${api.url}/dashboard`);
    await page.getByLabel('Admin token').fill('not-the-admin-token-but-long-enough-000');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'Wrong admin token.' }).waitFor();
    // the dashboard opened with a wrong token
    expect(await page.locator('header nav').count()).toBe(0);
    // The browser logs the refused sign-in's 401 as a failed resource: that one is expected, not the page's fault.
    consoleErrors.length = 0;
  });

  test('signed in, the fleet shows the device online with its model', async () => {
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await view('Fleet').waitFor();
    const row = page.locator('[data-testid="fleet-table"] tr', { hasText: deviceName });
    await row.filter({ hasText: 'online' }).waitFor();
    expect(await row.innerText()).toMatch(new RegExp(`${model}[\\s\\S]*tools`));
    // Filtered by its model, or by its pool, it stays in the list.
    await page.locator('select[name="model"]').selectOption(model);
    await row.waitFor();
    await page.locator('select[name="org"]').selectOption('network');
    await row.waitFor();
    await page.locator('select[name="model"]').selectOption('');
    await page.locator('select[name="org"]').selectOption('');
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === 'sy_admin_session');
    if (!session) {
      throw new Error(JSON.stringify(cookies));
    }
    expect(session.httpOnly).toBe(true);
    expect(session.sameSite).toBe('Strict');
    // the session does not expire
    expect(session.expires).toBeGreaterThan(Date.now() / 1000 + 3600);
    await shot('fleet');
  });

  test('a completion sent with the openai client is counted in traffic and usage', async () => {
    await open('Traffic');
    const summary = page.getByTestId('traffic-summary');
    await summary.waitFor();
    const before = Number(/(\d+) requests/.exec(await summary.innerText())![1]);

    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
    expect(completion.choices[0].finish_reason).toBe('stop');

    // Refreshed live: the count grows without a reload.
    await page.waitForFunction(
      (n) => {
        // Runs in the page: `document` is the browser's (the tests' own types have no DOM).
        const doc = (
          globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }
        ).document;
        const m = /(\d+) requests/.exec(doc.querySelector('[data-testid="traffic-summary"]')?.textContent ?? '');
        return m !== null && Number(m[1]) > n;
      },
      before,
      { timeout: 20_000 },
    );
    // the traffic charts are not drawn
    expect(await page.locator('.chart canvas').count()).toBeGreaterThanOrEqual(4);
    await shot('traffic');

    // Usage is read when the view opens: open it again until the task's record is written (write-behind).
    const usageRow = page.locator('[data-testid="usage-table"] tr', { hasText: tenant.org.name });
    let cells: string[] = [];
    for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
      await open('Usage');
      if ((await usageRow.count()) > 0) {
        cells = (await usageRow.locator('td').allInnerTexts()).slice(0, 5);
        if (cells[4] === '1') {
          break;
        }
      }
      await page.waitForTimeout(250);
    }
    expect(cells).toEqual([tenant.org.name, model, 'chat', '1', '1']);
    // By kind: the organization's chat tasks, its one model's among them.
    await page.locator('select[name="group"]').selectOption('kind');
    await page.locator('[data-testid="usage-table"] th', { hasText: 'Model' }).waitFor({ state: 'detached' });
    expect((await usageRow.locator('td').allInnerTexts()).slice(0, 4)).toEqual([tenant.org.name, 'chat', '1', '1']);
    await shot('usage');
    await page.locator('select[name="group"]').selectOption('model');

    await open('Tasks');
    await page
      .locator('input[name="task_address"]')
      .fill((completion as unknown as { task_address: string }).task_address);
    await page.getByRole('button', { name: 'Look up' }).click();
    const detail = page.getByTestId('task-detail');
    await detail.filter({ hasText: 'completed' }).waitFor();
    await detail.locator('tr', { hasText: 'kind' }).filter({ hasText: 'chat' }).waitFor();
    await shot('tasks');

    await open('Queues');
    await page.locator('[data-testid="queues-table"] tr', { hasText: model }).waitFor();
    await shot('queues');
    await open('Admin');
    await page.getByTestId('keys-table').waitFor();
    await shot('admin');
  });

  test("a resumed task's segments: which device produced which part of the answer", async () => {
    // A record as the dispatcher writes one for a task resumed once (the resume itself is relay-failures/resume's).
    const id = randomUUID();
    const address = `network:${id}`;
    const segment = (attempt: number, device: string, tokens: number, ended: string) => ({
      attempt,
      device_id: device,
      assigned_at: '2026-12-06T08:00:00.000Z',
      first_output_at: '2026-12-06T08:00:00.100Z',
      last_output_at: '2026-12-06T08:00:01.000Z',
      tokens,
      bytes: tokens * 5,
      sha256: 'ab'.repeat(32),
      ended,
    });
    await db().task.create({
      data: {
        id,
        address,
        orgId: tenant.org.id,
        modelId: model,
        mode: 'network',
        api: 'openai',
        stream: true,
        status: 'completed',
        attempts: 2,
        resumes: 1,
        deviceId,
        segments: [
          segment(1, 'device-lost-mid-answer', 10, 'device_disconnected'),
          segment(2, deviceId, 30, 'completed'),
        ],
      },
    });
    await open('Tasks');
    await page.locator('input[name="task_address"]').fill(address);
    await page.getByRole('button', { name: 'Look up' }).click();
    await page.locator('[data-testid="segments-table"] tbody tr').first().waitFor();
    const cells = await page
      .locator('[data-testid="segments-table"] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
    expect(cells.map((c) => [c[0], c[1], c[2], c[7]])).toEqual([
      ['1', 'device-lost-mid-answer', '10', 'device_disconnected'],
      ['2', deviceId, '30', 'completed'],
    ]);
    await page.getByText('Resumed: 2 segments').waitFor();
  });

  test('a quarantined device shows as such, with the reason on hover', async () => {
    await open('Fleet');
    const row = page.locator('[data-testid="fleet-table"] tr', { hasText: deviceName });
    await row.filter({ hasText: 'trusted' }).waitFor();
    const quarantined = await http('PATCH', `${api.url}/admin/devices/${deviceId}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      body: { trust: 'quarantined', reason: 'failed a check' },
    });
    expectStatus(quarantined, 200);
    await open('Queues');
    await open('Fleet');
    const badge = row.getByText('quarantined', { exact: true });
    await badge.waitFor();
    expect(await badge.getAttribute('title')).toBe('failed a check');
  });

  test('revoking the device, with confirmation, takes it offline', async () => {
    await open('Fleet');
    const row = page.locator('[data-testid="fleet-table"] tr', { hasText: deviceName });
    await row.getByRole('button', { name: 'Revoke' }).click();
    const dialog = page.getByTestId('confirm');
    await dialog.waitFor();
    expect(await dialog.innerText()).toMatch(new RegExp(`Revoke device ${deviceName}`));
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await row.filter({ hasText: 'revoked' }).filter({ hasText: 'offline' }).waitFor({ timeout: 20_000 });
  });

  test('the audit log shows who changed what: the dashboard’s revocation, the admin token’s quarantine', async () => {
    await open('Audit');
    const auditTable = page.getByTestId('audit-table');
    const row = (kind: string) => auditTable.locator('tbody tr', { hasText: kind }).filter({ hasText: deviceId });
    await row('device.revoke').waitFor();
    const revoked = await row('device.revoke').locator('td').allInnerTexts();
    expect(revoked.slice(1, 5)).toEqual([
      'dashboard',
      expect.stringMatching(/^dashboard:[0-9a-f]{12}$/),
      'device.revoke',
      deviceId,
    ]);
    expect(revoked[5]).toContain('status: active → revoked');
    const quarantined = await row('device.quarantine').locator('td').allInnerTexts();
    expect(quarantined.slice(1, 4)).toEqual([
      'api',
      expect.stringMatching(/^admin-token:[0-9a-f]{12}$/),
      'device.quarantine',
    ]);
    expect(quarantined[5]).toContain('trust.state: trusted → quarantined');
    // A kind: only its entries.
    await page.locator('select[name="kind"]').selectOption('device.quarantine');
    await row('device.revoke').waitFor({ state: 'detached' });
    const kinds = await auditTable.locator('tbody tr td:nth-child(4)').allInnerTexts();
    expect(new Set(kinds)).toEqual(new Set(['device.quarantine']));
    await shot('audit');
    await page.locator('select[name="kind"]').selectOption('');
    await row('device.revoke').waitFor();
  });

  test('signing out ends the session: the old cookie opens nothing', async () => {
    const cookie = (await page.context().cookies()).find((c) => c.name === 'sy_admin_session')!;
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    const replay = await http('GET', `${api.url}/admin/orgs`, {
      headers: { cookie: `sy_admin_session=${cookie.value}` },
    });
    expectStatus(replay, 401);
    await page.reload();
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    expect(consoleErrors).toEqual([]);
  });

  test('a session cannot change anything without the CSRF header', async () => {
    const signIn = await fetch(`${api.url}/dashboard/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: ADMIN_TOKEN }),
    });
    expect(signIn.status).toBe(204);
    const cookie = /sy_admin_session=[^;]+/.exec(signIn.headers.get('set-cookie') ?? '')![0];
    const forged = await http('POST', `${api.url}/admin/orgs`, { headers: { cookie }, body: { name: uniq('csrf') } });
    expectStatus(forged, 401);
    expect(forged.body.error.code).toBe('invalid_admin_token');
    const allowed = await http('POST', `${api.url}/admin/orgs`, {
      headers: { cookie, 'x-switchyard-csrf': '1' },
      body: { name: uniq('csrf') },
    });
    expectStatus(allowed, 201);
  });
});
