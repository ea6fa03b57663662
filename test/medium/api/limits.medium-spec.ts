import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import { createDevice, createTenant, db, sleep, taskCount, uniq, waitOnline } from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { relayApps } from '../support/apps';

/** Organization limits as a client meets them: requests per minute, requests at once, queued per model. */
describe('limits (api)', () => {
  const apps = relayApps();
  const { devices } = apps;

  /** A tenant with limits, and a model served by one fake device. */
  async function fixture(limits: { rpm?: number; concurrency?: number; maxQueued?: number }) {
    const model = uniq('medium-limits');
    await new AdminService(db()).addModel({ id: model, network: true });
    const tenant = await createTenant([model]);
    await new AdminService(db()).setLimits(tenant.org.name, limits);
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(fake);
    await waitOnline([model], token);
    return { model, tenant, fake };
  }

  const chat = (tenant: Tenant, model: string) =>
    fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });

  it('requests per minute: OpenAI rate-limit headers, then 429 with Retry-After, counted across requests', async () => {
    const { model, tenant, fake } = await fixture({ rpm: 2 });
    for (const remaining of ['1', '0']) {
      const pending = chat(tenant, model);
      const a = await fake.nextAssignment();
      fake.answer(a.task_address, ['ok']);
      const res = await pending;
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-limit-requests')).toBe('2');
      expect(res.headers.get('x-ratelimit-remaining-requests')).toBe(remaining);
    }
    const refused = await chat(tenant, model);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error).toMatchObject({
      code: 'rate_limit_exceeded',
      type: 'rate_limit_error',
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(await taskCount(tenant.org.id)).toBe(2);
  });

  it('requests at once: one over the limit gets 429, and the slot comes back when a request ends', async () => {
    const { model, tenant, fake } = await fixture({ concurrency: 1 });
    const first = chat(tenant, model);
    const a = await fake.nextAssignment();
    const refused = await chat(tenant, model);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error.code).toBe('rate_limit_exceeded');
    fake.answer(a.task_address, ['ok']);
    expect((await first).status).toBe(200);
    // Released when the task ended (a moment later, in Redis): the next request is taken.
    for (let i = 0; ; i++) {
      const next = chat(tenant, model);
      const answered = await Promise.race([next, fake.nextAssignment(1_000).catch(() => null)]);
      if (answered && 'task_address' in answered) {
        fake.answer(answered.task_address, ['next']);
        expect((await next).status).toBe(200);
        break;
      }
      expect([i < 20, (answered as Response | null)?.status]).toEqual([true, 429]);
      await sleep(50);
    }
  });

  it('queued per model: a request that would wait beyond the limit gets 429 at once', async () => {
    const { model, tenant, fake } = await fixture({ maxQueued: 1 });
    const running = chat(tenant, model);
    const a = await fake.nextAssignment();
    // The running request gives its queued slot back when its api hears of the assignment, a moment
    // after the device has it; until then a second request is refused too. Ask until one waits: its
    // task exists (its record is written behind, seconds late on a busy machine) and it has no answer.
    let queued: Promise<Response> | null = null;
    for (const deadline = Date.now() + 30_000; !queued;) {
      expect(Date.now()).toBeLessThan(deadline);
      const attempt = chat(tenant, model);
      let answer: Response | null = null;
      void attempt.then((res) => (answer = res));
      while (!answer && (await taskCount(tenant.org.id)) < 2) {
        await sleep(20);
      }
      if (answer) {
        expect((answer as Response).status).toBe(429);
        await sleep(20);
      } else {
        queued = attempt;
      }
    }
    const refused = await chat(tenant, model);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error.message).toMatch(/queued/);
    fake.answer(a.task_address, ['one']);
    const b = await fake.nextAssignment();
    fake.answer(b.task_address, ['two']);
    expect((await running).status).toBe(200);
    expect((await queued).status).toBe(200);
    expect(await taskCount(tenant.org.id)).toBe(2);
  });
});
