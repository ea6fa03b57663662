import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeDb, createDevice, createTenant, http, startApi, startDispatcher, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import { eventually, logLines, startRuntimeDevice, taskRow } from './support/device';
import { FakeOpenAI } from './support/fake-runtimes';

/** A span as the collector received it, with the service that sent it. */
interface ReceivedSpan {
  service: string;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  start: bigint;
  end: bigint;
}

/** OTLP/JSON ids are hex; a protobuf-JSON encoder would write base64: read either. */
const hexId = (id: string) => (/^[0-9a-f]+$/.test(id) ? id : Buffer.from(id, 'base64').toString('hex'));

/**
 * An OTLP/HTTP collector of traces, as an exporter meets it: `POST /v1/traces` with the JSON encoding of
 * ExportTraceServiceRequest, answered 200 `{}`. Keeps every span it receives.
 */
class FakeCollector {
  readonly spans: ReceivedSpan[] = [];
  private server: Server | null = null;

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.method === 'POST' && req.url === '/v1/traces') {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          for (const rs of body.resourceSpans ?? []) {
            const service = rs.resource?.attributes?.find((a: any) => a.key === 'service.name')?.value?.stringValue;
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                this.spans.push({
                  service,
                  name: s.name,
                  traceId: hexId(s.traceId),
                  spanId: hexId(s.spanId),
                  parentSpanId: s.parentSpanId ? hexId(s.parentSpanId) : '',
                  start: BigInt(s.startTimeUnixNano),
                  end: BigInt(s.endTimeUnixNano),
                });
              }
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  of(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }
}

/**
 * Traces (issue 39): with OTEL_EXPORTER_OTLP_ENDPOINT set, the real api, dispatcher and agent export
 * their spans of one request over OTLP/HTTP into one trace: the client's `traceparent` is the root's
 * parent, each process's spans hang under the one before, the runtime gets the agent's span as its
 * `traceparent`, and the task record and the logs carry the trace id.
 */
describe('traces across the api, the dispatcher and the agent', () => {
  const collector = new FakeCollector();
  const vllm = new FakeOpenAI(['meta-llama/Llama-3.2-3B-Instruct']);
  const model = uniq('traced/llama3.2');
  let api: Api;
  let dispatcher: Dispatcher;
  let agent: Proc;
  let tenant: Tenant;

  const chat = (headers: Record<string, string> = {}) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}`, ...headers },
      body: { model, messages: [{ role: 'user', content: 'hi' }] },
    });

  beforeAll(async () => {
    vllm.handlers.set('*', FakeOpenAI.reply({ choices: [['Hello', ' there']] }));
    const [endpoint] = await Promise.all([collector.start(), vllm.start()]);
    // Exported every 50 ms rather than every 5 s: the test waits for spans, not for a timer.
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_BSP_SCHEDULE_DELAY: '50' };
    [api, dispatcher] = await Promise.all([startApi(env), startDispatcher(env)]);
    tenant = await createTenant([model]);
    const { token } = await createDevice();
    agent = await startRuntimeDevice(dispatcher, token, {
      backend: 'openai',
      upstream: vllm.baseUrl,
      models: [`${model}=meta-llama/Llama-3.2-3B-Instruct`],
      env,
    });
  });

  afterAll(async () => {
    await Promise.all([agent?.stop(), api?.stop(), dispatcher?.stop()]);
    await Promise.all([collector.stop(), vllm.stop()]);
    await closeDb();
  });

  it("one request is one trace under the client's traceparent, linked across the three processes and into the runtime", async () => {
    const traceId = randomBytes(16).toString('hex');
    const clientSpan = randomBytes(8).toString('hex');
    const res = await chat({ traceparent: `00-${traceId}-${clientSpan}-01` });
    expectStatus(res, 200);
    expect(res.body.choices[0].message.content).toBe('Hello there');

    const expected = [
      'POST /v1/chat/completions',
      'queue wait',
      'assignment',
      'device run',
      'first token',
      'runtime call',
    ];
    const spans = await eventually(
      async () => collector.of(traceId),
      (got) => expected.every((name) => got.some((s) => s.name === name)),
      'every span of the request at the collector',
    );
    const one = (name: string) => {
      const found = spans.filter((s) => s.name === name);
      expect([name, found.length]).toEqual([name, 1]);
      return found[0];
    };
    const request = one('POST /v1/chat/completions');
    const run = one('device run');
    const runtime = one('runtime call');
    expect(request).toMatchObject({ service: 'switchyard-api', parentSpanId: clientSpan });
    for (const name of ['queue wait', 'assignment', 'device run']) {
      expect(one(name)).toMatchObject({ service: 'switchyard-dispatcher', parentSpanId: request.spanId });
    }
    expect(one('first token')).toMatchObject({ service: 'switchyard-dispatcher', parentSpanId: run.spanId });
    expect(runtime).toMatchObject({ service: 'switchyard-device', parentSpanId: run.spanId });
    // In order: the queue wait ends before the device run starts, which starts before the runtime call.
    expect(one('queue wait').end <= run.start).toBe(true);
    expect(run.start <= runtime.start).toBe(true);
    expect(request.start <= one('queue wait').start).toBe(true);

    // The runtime was asked with the agent's span as its parent.
    const asked = vllm.requests.filter((r) => r.path === '/v1/chat/completions').at(-1)!;
    expect(asked.headers.traceparent).toBe(`00-${traceId}-${runtime.spanId}-01`);

    // The task record and the agent's log line name the trace.
    const row = await taskRow(tenant);
    expect(row.traceId).toBe(traceId);
    const view = await http('GET', `${api.url}/v1/tasks/${row.address}`, {
      headers: { authorization: `Bearer ${tenant.key}` },
    });
    expect(view.body.trace_id).toBe(traceId);
    const finished = logLines(agent).filter((l) => l.msg === 'task finished' && l.task_address === row.address);
    expect(finished.map((l) => l.trace_id)).toEqual([traceId]);
  });

  it('a request without a traceparent starts a trace of its own, recorded with its task', async () => {
    const before = new Set(collector.spans.map((s) => s.traceId));
    expectStatus(await chat(), 200);
    const row = await taskRow(tenant);
    expect(row.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(before.has(row.traceId!)).toBe(false);
    const spans = await eventually(
      async () => collector.of(row.traceId!),
      (got) => got.some((s) => s.name === 'runtime call'),
      'the new trace at the collector',
    );
    const root = spans.find((s) => s.name === 'POST /v1/chat/completions')!;
    expect(root).toMatchObject({ service: 'switchyard-api', parentSpanId: '' });
  });
});
