import OpenAI from 'openai';
import { ADMIN_TOKEN, closeDb, createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import {
  LiveStream,
  bearer,
  chatBody,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitStatus,
  within,
} from '../reliability/helpers';

/**
 * Resume (issue 37): a device lost after output reached the client, and another device continues the
 * answer in the same client stream. The sim is deterministic (its reply is a function of the
 * conversation and max_tokens), so a resumed answer must equal the same request served without a
 * failure: text, finish reason and usage.
 */
const HANG_MS = 30_000;
const SIM = { tokensPerSecond: 25, tokens: 40 };
/** A device silent this long about a task is dropped (the sim streams a token every 40 ms otherwise). */
const ENV = { TASK_IDLE_TIMEOUT_MS: '3000' };

interface Served {
  text: string;
  finish: string;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

describe('resume: a stream survives its device', () => {
  let api: Api;
  let d1: Dispatcher;
  let d2: Dispatcher;
  const procs: Proc[] = [];
  const servers: { proc: Proc }[] = [];
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

  beforeAll(async () => {
    [api, d1, d2] = await Promise.all([startApi(ENV), startDispatcher(ENV), startDispatcher(ENV)]);
    servers.push(api, d1, d2);
  });

  afterAll(async () => {
    await stopAll(procs, servers);
    await closeDb();
  });

  /** A sim device on `first` (and `second` when its dispatcher goes), with the same sim settings as every other. */
  async function device(
    model: string,
    first: Dispatcher,
    opts: { second?: Dispatcher; features?: string[]; tokensPerSecond?: number } = {},
  ) {
    const { id, token } = await createDevice();
    const proc = await startDevice(first.url, token, {
      models: [model],
      ...SIM,
      // The pace changes nothing of what the sim says, only when.
      ...(opts.tokensPerSecond ? { tokensPerSecond: opts.tokensPerSecond } : {}),
      ...(opts.features ? { features: opts.features } : {}),
      extraArgs: opts.second ? ['--server', opts.second.url] : [],
    });
    procs.push(proc);
    return { id, token, proc };
  }

  const url = () => `${api.url}/v1/chat/completions`;
  const body = (model: string, extra: Record<string, unknown> = {}) =>
    chatBody(model, 'tell me about the relay', { stream: true, stream_options: { include_usage: true }, ...extra });

  /** The same request served without a failure: what a resumed one must equal. */
  async function reference(tenant: Tenant, model: string): Promise<Served> {
    const res = await http('POST', url(), {
      headers: bearer(tenant.key),
      body: body(model, { stream: false, stream_options: undefined }),
    });
    expectStatus(res, 200);
    return {
      text: res.body.choices[0].message.content,
      finish: res.body.choices[0].finish_reason,
      usage: res.body.usage,
    };
  }

  /** What the client of a finished stream got, checked for one stream: one id, one role chunk, [DONE]. */
  function received(live: LiveStream): Served & { address: string } {
    expectStatus(live, 200);
    const events = live.events;
    expect({ last: events.at(-1), tail: live.text.slice(-300) }).toEqual(expect.objectContaining({ last: '[DONE]' }));
    const chunks = events.filter((e) => e !== '[DONE]');
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.filter((c) => c.choices?.[0]?.delta?.role).length).toBe(1);
    const finishes = chunks.flatMap((c) => (c.choices ?? []).map((x: any) => x.finish_reason)).filter(Boolean);
    expect(finishes).toHaveLength(1);
    return {
      text: sseContent(events),
      finish: finishes[0],
      usage: chunks.at(-1).usage,
      address: chunks[0].task_address,
    };
  }

  /** Starts the streamed request and waits until part of the answer reached the client, then kills its device. */
  async function killMidStream(
    tenant: Tenant,
    model: string,
    devices: { id: string; proc: Proc }[],
    extra: Record<string, unknown> = {},
  ) {
    const live = new LiveStream(url(), tenant.key, body(model, extra));
    await live.waitFor(/"content":"[^"]+"[\s\S]*"content":"[^"]+"[\s\S]*"content":"[^"]+"/);
    const row = await waitStatus(tenant.org.id, 'streaming');
    const holder = devices.find((d) => d.id === row.deviceId)!;
    const before = sseContent(live.events);
    holder.proc.child.kill('SIGKILL');
    return { live, holder, before };
  }

  it('SIGKILL of the device mid-stream: the same stream goes on on another device, equal to an answer served whole', async () => {
    const model = uniq('resume');
    const tenant = await createTenant([model]);
    const a = await device(model, d1);
    const whole = await reference(tenant, model);
    const b = await device(model, d1);

    const { live, holder, before } = await killMidStream(tenant, model, [a, b]);
    await within(live.done, HANG_MS, 'the resumed stream');
    const got = received(live);
    expect(before.length).toBeGreaterThan(0);
    expect(got.text).toBe(whole.text);
    expect(got.finish).toBe(whole.finish);
    expect(got.usage).toEqual(whole.usage);

    // The record: completed, resumed once, usage of the whole answer, two segments (the dead device's first).
    await recordsWritten();
    const row = await db().task.findFirstOrThrow({ where: { address: got.address } });
    expect(row).toMatchObject({
      status: 'completed',
      resumes: 1,
      finishReason: whole.finish,
      completionTokens: whole.usage.completion_tokens,
      promptTokens: whole.usage.prompt_tokens,
    });
    const other = holder.id === a.id ? b : a;
    expect(row.deviceId).toBe(other.id);
    const view = await http('GET', `${api.url}/admin/tasks/${got.address}`, { headers: admin });
    expectStatus(view, 200);
    const segments = view.body.segments as { device_id: string; tokens: number; ended: string }[];
    expect(segments.map((s) => [s.device_id, s.ended])).toEqual([
      [holder.id, 'device_disconnected'],
      [other.id, 'completed'],
    ]);
    expect(segments[0].tokens + segments[1].tokens).toBe(whole.usage.completion_tokens);
    const own = await http('GET', `${api.url}/v1/tasks/${got.address}`, { headers: bearer(tenant.key) });
    expect(own.body).toMatchObject({ status: 'completed', resumes: 1 });
  }, 120_000);

  it('a device that goes silent mid-stream (SIGSTOP) for TASK_IDLE_TIMEOUT_MS: dropped, and the answer continued elsewhere', async () => {
    const model = uniq('resume-silent');
    const tenant = await createTenant([model]);
    const a = await device(model, d1);
    const whole = await reference(tenant, model);
    const b = await device(model, d1);
    const live = new LiveStream(url(), tenant.key, body(model));
    await live.waitFor(/"content":"[^"]+"[\s\S]*"content":"[^"]+"/);
    const row = await waitStatus(tenant.org.id, 'streaming');
    const frozen = [a, b].find((d) => d.id === row.deviceId)!;
    frozen.proc.child.kill('SIGSTOP');
    try {
      await within(live.done, HANG_MS, 'the stream whose device froze');
    } finally {
      frozen.proc.child.kill('SIGCONT');
    }
    const got = received(live);
    expect(got.text).toBe(whole.text);
    expect(got.usage).toEqual(whole.usage);
    await recordsWritten();
    const view = await http('GET', `${api.url}/admin/tasks/${got.address}`, { headers: admin });
    expect((view.body.segments as { ended: string }[]).map((s) => s.ended)).toEqual(['device_timeout', 'completed']);
  }, 120_000);

  it('a frozen device is not given its task back: the resume waits for another device rather than for its acknowledgement', async () => {
    const model = uniq('resume-stuck');
    const tenant = await createTenant([model]);
    const a = await device(model, d1);
    const whole = await reference(tenant, model);
    // b is busy (a long answer) when a is dropped: the only idle device then is the frozen one.
    const b = await device(model, d1, { tokensPerSecond: 4 });
    const live = new LiveStream(url(), tenant.key, body(model));
    await live.waitFor(/"content":"[^"]+"[\s\S]*"content":"[^"]+"/);
    const first = await waitStatus(tenant.org.id, 'streaming');
    expect(first.deviceId).toBe(a.id);
    const busy = http('POST', url(), {
      headers: bearer(tenant.key),
      // 6 s at 4 tokens a second: past a's drop (3 s after it froze), well before its rest from the queue ends (10 s).
      body: chatBody(model, 'keeps b busy', { max_tokens: 24 }),
    });
    await waitStatus(tenant.org.id, 'streaming', HANG_MS, { deviceId: b.id, address: { not: first.address } });
    a.proc.child.kill('SIGSTOP');
    try {
      await within(live.done, HANG_MS * 2, 'the stream whose device froze');
    } finally {
      a.proc.child.kill('SIGCONT');
    }
    expect(received(live).text).toBe(whole.text);
    await recordsWritten();
    const row = await db().task.findFirstOrThrow({ where: { address: first.address } });
    // Two claims: a's, then b's once free. Offered to a again, it would have been three (a's silence, then b).
    expect(row).toMatchObject({ status: 'completed', resumes: 1, attempts: 2, deviceId: b.id });
    expectStatus(await busy, 200);
  }, 120_000);

  it('non-streamed: the client gets one whole answer, as if nothing had happened', async () => {
    const model = uniq('resume-whole');
    const tenant = await createTenant([model]);
    const a = await device(model, d1);
    const whole = await reference(tenant, model);
    const b = await device(model, d1);
    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    const pending = client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'tell me about the relay' }],
    });
    const row = await waitStatus(tenant.org.id, 'streaming');
    [a, b].find((d) => d.id === row.deviceId)!.proc.child.kill('SIGKILL');
    const answer = await within(pending, HANG_MS, 'the resumed answer');
    expect(answer.choices[0].message.content).toBe(whole.text);
    expect(answer.choices[0].finish_reason).toBe(whole.finish);
    expect(answer.usage).toMatchObject(whole.usage);
  }, 120_000);

  it('SIGKILL of the dispatcher mid-stream: a survivor takes the task over and another device continues it', async () => {
    const model = uniq('resume-disp');
    const tenant = await createTenant([model]);
    // The doomed dispatcher's device (slow, so that it is still streaming when its dispatcher dies)
    // knows the survivor too; the survivor gets a device of its own once the stream runs on the first.
    const a = await device(model, d1, { second: d2, tokensPerSecond: 5 });
    const whole = await reference(tenant, model);
    const live = new LiveStream(url(), tenant.key, body(model));
    await live.waitFor(/"content":"[^"]+"[\s\S]*"content":"[^"]+"/);
    const row = await waitStatus(tenant.org.id, 'streaming', HANG_MS);
    expect(row.deviceId).toBe(a.id);
    await device(model, d2, { second: d1 });
    d1.proc.child.kill('SIGKILL');
    await within(live.done, HANG_MS * 2, 'the stream whose dispatcher died');
    const got = received(live);
    expect(got.text).toBe(whole.text);
    expect(got.finish).toBe(whole.finish);
    expect(got.usage).toEqual(whole.usage);
    await recordsWritten();
    const done = await db().task.findFirstOrThrow({ where: { address: got.address } });
    expect(done).toMatchObject({ status: 'completed', resumes: 1 });
    const restarted = await startDispatcher(ENV, d1.port);
    servers.push(restarted);
    d1 = restarted;
  }, 150_000);

  it('chaos: 3 devices, 20 streams two at a time, a device SIGKILLed and restarted every 2 s: every stream whole', async () => {
    const model = uniq('resume-chaos');
    const tenant = await createTenant([model]);
    const fleet = [await device(model, d2), await device(model, d2), await device(model, d2)];
    const whole = await reference(tenant, model);
    let stop = false;
    let kills = 0;
    const killer = (async () => {
      while (!stop) {
        await new Promise((r) => setTimeout(r, 2_000));
        if (stop) {
          break;
        }
        const victim = fleet[kills++ % fleet.length];
        victim.proc.child.kill('SIGKILL');
        const { token } = victim;
        // The same device comes back (its token), as an operator's service manager restarts it.
        victim.proc = await startDevice(d2.url, token, { models: [model], ...SIM }, { wait: false });
        procs.push(victim.proc);
      }
    })();
    const results: Served[] = [];
    let next = 0;
    const client = async () => {
      while (next < 20) {
        next++;
        const live = new LiveStream(url(), tenant.key, body(model));
        await within(live.done, HANG_MS, 'a stream under chaos');
        results.push(received(live));
      }
    };
    try {
      await Promise.all([client(), client()]);
    } finally {
      stop = true;
      await killer;
    }
    expect(results.map((r) => r.text === whole.text && r.finish === whole.finish)).toEqual(results.map(() => true));
    expect(kills).toBeGreaterThan(3);
    // Two devices of three are streaming at most moments: kills that hit one were resumed.
    await recordsWritten();
    const resumed = await db().task.count({ where: { orgId: tenant.org.id, resumes: { gt: 0 } } });
    expect(resumed).toBeGreaterThan(0);
  }, 180_000);

  it('no resume when the organization turned it off, when no online device can continue, with n > 1 or a json_schema: the explicit error stays', async () => {
    const model = uniq('resume-off');
    const tenant = await createTenant([model]);
    const off = await http('PATCH', `${api.url}/admin/orgs/${tenant.org.name}`, {
      headers: admin,
      body: { resume: false },
    });
    expectStatus(off, 200);
    const a = await device(model, d2);
    const b = await device(model, d2);
    const first = await killMidStream(tenant, model, [a, b]);
    await within(first.live.done, HANG_MS, 'the stream of an org without resume');
    expect(first.live.events.at(-1).error.code).toBe('device_disconnected');

    // Devices that cannot continue (no `continue` feature) for an org that allows resume.
    const plain = uniq('resume-plain');
    const other = await createTenant([plain]);
    const features = ['tools', 'json_object', 'json_schema', 'logprobs', 'n', 'stream_usage'];
    const c = await device(plain, d2, { features });
    const d = await device(plain, d2, { features });
    const second = await killMidStream(other, plain, [c, d]);
    await within(second.live.done, HANG_MS, 'the stream without a device that can continue');
    expect(second.live.events.at(-1).error.code).toBe('device_disconnected');
    expect(second.live.events).not.toContain('[DONE]');
    // n > 1: each choice's text would need a device that continues all of them at once.
    const multi = uniq('resume-n');
    const nTenant = await createTenant([multi]);
    const e = await device(multi, d2);
    const f = await device(multi, d2);
    const third = await killMidStream(nTenant, multi, [e, f], { n: 2 });
    await within(third.live.done, HANG_MS, 'the stream with two choices');
    expect(third.live.events.at(-1).error.code).toBe('device_disconnected');
    // json_schema: a runtime's schema-constrained decoding cannot start in the middle of a document.
    const structured = uniq('resume-json');
    const jsonTenant = await createTenant([structured]);
    const slow = [
      await device(structured, d2, { tokensPerSecond: 4 }),
      await device(structured, d2, { tokensPerSecond: 4 }),
    ];
    const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
    const fourth = await killMidStream(jsonTenant, structured, slow, {
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } },
    });
    await within(fourth.live.done, HANG_MS, 'the stream with a json_schema');
    expect(fourth.live.events.at(-1).error.code).toBe('device_disconnected');
    await recordsWritten();
    const rows = await db().task.findMany({
      where: { orgId: { in: [tenant.org.id, other.org.id, nTenant.org.id, jsonTenant.org.id] } },
    });
    expect(rows.filter((r) => r.errorCode === 'device_disconnected').map((r) => r.resumes)).toEqual([0, 0, 0, 0]);
  }, 120_000);
});
