import { io } from 'socket.io-client';
import { DEVICE_NAMESPACE, PREVIOUS_PROTOCOL_VERSION, PROTOCOL_VERSION } from '@app/common';
import { FakeDevice } from '../support/fake-device';
import {
  closeDb,
  createDevice,
  db,
  createTenant,
  http,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
  waitTerminal,
} from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { waitOffline } from './support/device';

const TOOLS = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];

/**
 * A rolling upgrade: dispatchers are upgraded first, and serve the agents not yet upgraded, which speak
 * the previous protocol version (docs/protocol.md, Versions). A hand-written device of that version is
 * served through the dispatcher's dialect of it: what it sends is read into the current shapes, what
 * the dispatcher sends is written in its own, and it is offered only what its version can do.
 */
describe('a device of the previous protocol version (2)', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const fakes: FakeDevice[] = [];

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
  });

  afterEach(() => {
    fakes.splice(0).forEach((f) => f.close());
  });

  afterAll(async () => {
    await Promise.all([api, dispatcher].filter(Boolean).map((p) => p.proc.stop('SIGTERM', 3_000)));
    await closeDb();
  });

  /** A network device of the previous version, online for a model of a new organization. */
  async function previousVersionDevice(features: string[]) {
    const model = uniq('previous-protocol');
    const tenant = await createTenant([model]);
    const { id, token } = await createDevice();
    const device = await FakeDevice.connect(dispatcher.url, token, [model], {
      protocol: PREVIOUS_PROTOCOL_VERSION,
      features,
    });
    fakes.push(device);
    await waitOnline([model], token);
    return { model, tenant, id, token, device };
  }

  const chat = (tenant: Tenant, body: object) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { messages: [{ role: 'user', content: 'What is the weather?' }], ...body },
    });

  /** The handshake's answer for a protocol version: 'connected', or connect_error's message. */
  async function handshake(protocol: number): Promise<string> {
    const { token } = await createDevice();
    const socket = io(`${dispatcher.url}${DEVICE_NAMESPACE}`, {
      transports: ['websocket'],
      auth: { token, protocol },
      reconnection: false,
      forceNew: true,
    });
    return new Promise((resolve) => {
      socket.once('connect', () => resolve('connected'));
      socket.once('connect_error', (err) => resolve(err.message));
    }).finally(() => socket.disconnect()) as Promise<string>;
  }

  it('is served: its announce answered, its task assigned and its answer relayed, each in its version', async () => {
    const { model, tenant, id, device } = await previousVersionDevice(['tools']);
    // An announce without identities: read as one that says nothing of its models.
    expect(device.announceAck).toEqual({ ok: true, device_id: id, pool: 'network', models: [model], refused: [] });

    const pending = chat(tenant, { model, tools: TOOLS, stop: ['\n\n'], include_stop_str_in_output: true });
    const task = await device.nextAssignment();
    expect(task.params).toEqual({
      messages: [{ role: 'user', content: 'What is the weather?' }],
      max_tokens: task.params.max_tokens,
      stop: ['\n\n'],
      include_stop_str_in_output: true,
      tools: TOOLS,
      stream_usage: task.params.stream_usage,
    });
    device.answer(task.task_address, ['Sunny', ' today']);
    const res = await pending;
    expect([res.status, res.body.choices[0].message.content]).toEqual([200, 'Sunny today']);
    const row = await waitTerminal(task.task_address);
    expect([row.status, row.modelDigest]).toEqual(['completed', null]);
  });

  it('is refused a model pinned to digests as not_allowed, the refusal its version knows', async () => {
    const { model, token, device } = await previousVersionDevice([]);
    await db().model.update({ where: { id: model }, data: { allowedDigests: [`sha256:${'c'.repeat(64)}`] } });
    // The dispatcher checks connected devices again within a second or two.
    await waitOffline(token, model);
    const again = await device.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: [model],
      features: [],
      available: true,
      running_task: null,
    });
    expect(again).toEqual({
      ok: true,
      device_id: again.device_id,
      pool: 'network',
      models: [],
      refused: [{ model, reason: 'not_allowed' }],
    });
  });

  it('the handshake serves the current and the previous version and refuses any other, as before', async () => {
    expect(await handshake(PROTOCOL_VERSION)).toBe('connected');
    expect(await handshake(PREVIOUS_PROTOCOL_VERSION)).toBe('connected');
    const refusal = `unsupported_protocol: this dispatcher speaks protocol ${PROTOCOL_VERSION} or ${PREVIOUS_PROTOCOL_VERSION}`;
    expect(await handshake(PROTOCOL_VERSION + 1)).toBe(refusal);
    expect(await handshake(PREVIOUS_PROTOCOL_VERSION - 1)).toBe(refusal);
  });
});
