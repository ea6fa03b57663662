import OpenAI from 'openai';
import { FakeDevice } from '../support/fake-device';
import { closeDb, createDevice, createTenant, db, http, recordsWritten, uniq, waitOnline } from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { LiveStream } from '../reliability/helpers';
import { bearer, startApi, startDispatcher } from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * Fair queues (issue 18): organizations with backlogs in one queue are served in proportion to their
 * weights, a late small organization is served soon, and a waiting client can see where it stands.
 * One fake device serves the queue, so the test decides when each assignment ends and reads their order.
 */
describe('fair queues and queue status', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let device: FakeDevice;
  const model = uniq('fair');

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    const { token } = await createDevice();
    await db().model.upsert({ where: { id: model }, create: { id: model, network: true }, update: {} });
    device = await FakeDevice.connect(dispatcher.url, token, [model]);
    await waitOnline([model], token);
  });

  afterAll(async () => {
    device?.close();
    await Promise.all([api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  async function tenant(weight: number): Promise<Tenant> {
    const t = await createTenant([model]);
    // Before its first request: the api reads the weight with the key.
    await db().organization.update({ where: { id: t.org.id }, data: { weight } });
    return t;
  }

  const chat = (t: Tenant, content: string) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: bearer(t.key),
      body: { model, messages: [{ role: 'user', content }], max_tokens: 4 },
    });

  /** Waits until `n` tasks of these orgs are queued (their records written). */
  async function queued(orgIds: string[], n: number): Promise<void> {
    for (let i = 0; ; i++) {
      await recordsWritten();
      const count = await db().task.count({ where: { orgId: { in: orgIds }, status: 'queued' } });
      if (count >= n) {
        return;
      }
      expect({ ok: i < 400, message: `only ${count} of ${n} tasks queued` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Answers the device's next assignment and says whose it was (the prompt names its org). */
  async function serveOne(): Promise<string> {
    const a = await device.nextAssignment();
    device.answer(a.task_address, ['ok']);
    return String(a.params.messages[0].content).split(' ')[0];
  }

  it('weights 1 and 3 with standing backlogs: assignments within ±10 % of 1:3; a late small org is served within a few', async () => {
    const [light, heavy, late] = await Promise.all([tenant(1), tenant(3), tenant(1)]);
    // The light org's burst comes first and occupies the device; then the heavy org's.
    const pending = [chat(light, 'light 0')];
    const first = await device.nextAssignment();
    for (let i = 1; i <= 40; i++) {
      pending.push(chat(light, `light ${i}`));
    }
    await queued([light.org.id], 40);
    for (let i = 0; i < 40; i++) {
      pending.push(chat(heavy, `heavy ${i}`));
    }
    await queued([light.org.id, heavy.org.id], 80);
    device.answer(first.task_address, ['ok']);

    const order: string[] = [];
    for (let i = 0; i < 40; i++) {
      order.push(await serveOne());
    }
    // Both backlogs stood through these 40: weight 1 against 3 is a quarter of them (±10 %).
    const light40 = order.filter((o) => o === 'light').length;
    expect([light40 >= 9 && light40 <= 11, order]).toEqual([true, order]);

    // The late org arrives with both backlogs still standing.
    const latePending = [chat(late, 'late 0'), chat(late, 'late 1')];
    await queued([late.org.id], 2);
    const lateAt = order.length;
    for (let i = 0; i < 16; i++) {
      order.push(await serveOne());
    }
    // Served within its first turns, not after the 40 still waiting.
    const lateServed = order.map((o, i) => (o === 'late' ? i - lateAt : -1)).filter((i) => i >= 0);
    expect(lateServed).toHaveLength(2);
    expect(Math.max(...lateServed)).toBeLessThan(10);

    // Whatever is left is served in full.
    for (let left = 81 + 2 - 1 - order.length; left > 0; left--) {
      await serveOne();
    }
    const results = await Promise.all([...pending, ...latePending]);
    expect(results.map((r) => r.status)).toEqual(results.map(() => 200));
  }, 120_000);

  it('GET /v1/tasks and include_queue_status: the position counts down to 1, then the first token; the openai client reads it unchanged', async () => {
    const t = await tenant(1);
    const blocker = chat(t, 'blocker');
    const held = await device.nextAssignment();
    const waiting = [chat(t, 'ahead 0'), chat(t, 'ahead 1')];
    await queued([t.org.id], 2);
    const live = new LiveStream(`${api.url}/v1/chat/completions`, t.key, {
      model,
      messages: [{ role: 'user', content: 'mine' }],
      stream: true,
      stream_options: { include_queue_status: true },
    });
    // The stream opens at once, before any device has the task, and says where it stands.
    await live.waitFor(/: queue position=3/);
    expect(live.status).toBe(200);
    const address = live.events[0].task_address as string;
    const view = await http('GET', `${api.url}/v1/tasks/${address}`, { headers: bearer(t.key) });
    expectStatus(view, 200);
    expect(view.body).toMatchObject({ status: 'queued', queue_position: 3 });
    expect(view.body.eta_ms === null || Number.isInteger(view.body.eta_ms)).toBe(true);

    device.answer(held.task_address, ['ok']);
    await live.waitFor(/: queue position=2/);
    await serveAndExpect(live, /: queue position=1/);
    await serveOne();
    const mine = await device.nextAssignment();
    expect(mine.params.messages[0].content).toBe('mine');
    device.answer(mine.task_address, ['hello', ' there']);
    await live.done;
    const positions = [...live.text.matchAll(/: queue position=(\d+)/g)].map((m) => Number(m[1]));
    expect(positions).toEqual([...positions].sort((a, b) => b - a));
    expect(positions.at(-1)).toBe(1);
    // No queue comment after the first token.
    const afterFirstToken = live.text.slice(live.text.indexOf('"content":"hello"'));
    expect(afterFirstToken).not.toMatch(/: queue/);
    expect((await Promise.all([blocker, ...waiting])).map((r) => r.status)).toEqual([200, 200, 200]);
    const done = await http('GET', `${api.url}/v1/tasks/${address}`, { headers: bearer(t.key) });
    expect(done.body.queue_position).toBeUndefined();

    // The openai client: the comments are invisible, the content is whole.
    const client = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: t.key, maxRetries: 0 });
    const blocker2 = chat(t, 'blocker 2');
    const held2 = await device.nextAssignment();
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'sdk' }],
      stream: true,
      stream_options: { include_queue_status: true } as unknown as OpenAI.ChatCompletionStreamOptions,
    });
    const read = (async () => {
      let content = '';
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta?.content ?? '';
      }
      return content;
    })();
    // The request waits (its stream open, a status comment sent) until the device is free.
    await queued([t.org.id], 1);
    device.answer(held2.task_address, ['ok']);
    const sdk = await device.nextAssignment();
    device.answer(sdk.task_address, ['from', ' the', ' sdk']);
    expect(await read).toBe('from the sdk');
    expect((await blocker2).status).toBe(200);
  }, 60_000);

  it("a position counts only the caller's own organization: another organization's waiting requests do not show", async () => {
    const [mine, theirs] = [await tenant(1), await tenant(1)];
    const blocker = chat(theirs, 'blocker');
    const held = await device.nextAssignment();
    // Theirs waits first, three deep; then mine.
    const waiting = [chat(theirs, 'theirs 0'), chat(theirs, 'theirs 1'), chat(theirs, 'theirs 2')];
    await queued([theirs.org.id], 3);
    const first = chat(mine, 'mine 0');
    await queued([mine.org.id], 1);
    const second = chat(mine, 'mine 1');
    await queued([mine.org.id], 2);
    const rows = await db().task.findMany({ where: { orgId: mine.org.id }, orderBy: { queuedAt: 'asc' } });
    const positions = await Promise.all(
      rows.map(
        async (row) => (await http('GET', `${api.url}/v1/tasks/${row.address}`, { headers: bearer(mine.key) })).body,
      ),
    );
    expect(positions.map((p) => [p.status, p.queue_position])).toEqual([
      ['queued', 1],
      ['queued', 2],
    ]);
    // Everything is still served in full.
    device.answer(held.task_address, ['ok']);
    for (let i = 0; i < 5; i++) {
      const a = await device.nextAssignment();
      device.answer(a.task_address, ['ok']);
    }
    const answers = await Promise.all([blocker, ...waiting, first, second]);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
  }, 60_000);

  /** Ends the device's current assignment and waits for the stream to report the next position. */
  async function serveAndExpect(live: LiveStream, next: RegExp): Promise<void> {
    const a = await device.nextAssignment();
    device.answer(a.task_address, ['ok']);
    await live.waitFor(next);
  }
});
