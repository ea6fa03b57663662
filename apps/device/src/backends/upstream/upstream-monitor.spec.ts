import { createLogger } from '@app/common/logging/logger';
import type { Feature } from '@app/common/protocol/chat';
import { BackendError, cancelledError } from '../backend';
import type { ModelMapping, ProbeResult } from './upstream-monitor';
import { UNKNOWN_IDENTITY, UpstreamMonitor } from './upstream-monitor';

const logger = createLogger('monitor-test', 'silent');
const monitors: UpstreamMonitor[] = [];
afterEach(() => monitors.splice(0).forEach((m) => m.stop()));

async function until(predicate: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !predicate(); i++) {
    await new Promise((r) => setTimeout(r, 5));
  }
  expect({ ok: predicate(), message: `timed out waiting for ${what}` }).toEqual(expect.objectContaining({ ok: true }));
}

/** A monitor over a scripted runtime: `state.answer` is what the next probe gets. */
function harness(mapping: ModelMapping[] = [], featureOverride?: Feature[], intervalMs = 100) {
  const state: { answer: ProbeResult | Error; probes: number; changes: number } = {
    answer: { models: ['a'], features: ['tools'], runtime: 'fake', identities: new Map() },
    probes: 0,
    changes: 0,
  };
  const monitor = new UpstreamMonitor({
    backend: 'fake',
    mapping,
    featureOverride,
    defaultFeatures: ['stream_usage'],
    discoveryIntervalMs: intervalMs,
    healthIntervalMs: intervalMs,
    probeTimeoutMs: 1_000,
    probe: async () => {
      state.probes++;
      if (state.answer instanceof Error) {
        throw state.answer;
      }
      return state.answer;
    },
    aliases: (name) => [name, `${name}:latest`],
    logger,
  });
  monitors.push(monitor);
  return { monitor, state, start: () => monitor.start(() => state.changes++) };
}

const unreachable = () => new BackendError('upstream_unreachable', 'cannot reach the upstream (ECONNREFUSED)');

void describe('UpstreamMonitor', () => {
  void it('serves what the runtime lists, and follows additions and removals', async () => {
    const h = harness();
    await h.start();
    expect(h.monitor.available()).toBe(true);
    expect(h.monitor.models()).toEqual(['a']);
    expect(h.monitor.features()).toEqual(['tools']);
    expect(h.monitor.upstreamName('a')).toBe('a');
    h.state.answer = { models: ['b', 'a'], features: ['tools'], runtime: 'fake', identities: new Map() };
    await until(() => h.monitor.models().length === 2, 'an added model');
    expect(h.monitor.models()).toEqual(['a', 'b']);
    h.state.answer = { models: ['b'], features: ['tools'], runtime: 'fake', identities: new Map() };
    await until(() => h.monitor.models().length === 1, 'a removed model');
    expect(() => h.monitor.upstreamName('a')).toThrow(expect.objectContaining({ code: 'model_not_found' }));
    expect(h.state.changes).toBeGreaterThanOrEqual(2);
  });

  void it('says what the runtime says of each model served, under its public id, and tells the agent of a change', async () => {
    const digest = (c: string) => `sha256:${c.repeat(64)}`;
    const identity = (d: string) => ({ ...UNKNOWN_IDENTITY, digest: d, family: 'llama' });
    const h = harness();
    h.state.answer = {
      models: ['a', 'b'],
      features: ['tools'],
      runtime: 'fake',
      identities: new Map([['a', identity(digest('1'))]]),
    };
    await h.start();
    // b: the runtime said nothing of it, so the announce says nothing either.
    expect(h.monitor.identities()).toEqual([{ model: 'a', ...identity(digest('1')) }]);
    const changes = h.state.changes;
    h.state.answer = { ...h.state.answer, identities: new Map([['a', identity(digest('2'))]]) };
    await until(() => h.monitor.identities()[0]?.digest === digest('2'), 'a new digest');
    expect(h.state.changes).toBe(changes + 1);

    // Under a mapping, the runtime's entry for the upstream name or an alias of it (Ollama's `:latest`).
    const mapped = harness([{ public: 'org/m', upstream: 'm' }]);
    mapped.state.answer = {
      models: ['m:latest'],
      features: ['tools'],
      runtime: 'fake',
      identities: new Map([['m:latest', identity(digest('3'))]]),
    };
    await mapped.start();
    expect(mapped.monitor.identities()).toEqual([{ model: 'org/m', ...identity(digest('3')) }]);
  });

  void it('keeps explicit mappings whatever the runtime lists, and honours --features', async () => {
    const h = harness([{ public: 'org/Model-GGUF:Q4', upstream: 'model:3b' }], ['n']);
    h.state.answer = { models: [], features: ['tools'], runtime: 'fake', identities: new Map() };
    await h.start();
    expect(h.monitor.models()).toEqual(['org/Model-GGUF:Q4']);
    expect(h.monitor.upstreamName('org/Model-GGUF:Q4')).toBe('model:3b');
    expect(() => h.monitor.upstreamName('model:3b')).toThrow(expect.objectContaining({ code: 'model_not_found' }));
    expect(h.monitor.features()).toEqual(['n']);
  });

  void it('is unavailable while the runtime cannot be reached, and available again once it answers', async () => {
    const h = harness();
    h.state.answer = unreachable();
    await h.start();
    expect(h.monitor.available()).toBe(false);
    expect(h.monitor.features()).toEqual(['stream_usage']);
    h.state.answer = { models: ['a'], features: ['tools'], runtime: 'fake', identities: new Map() };
    await until(() => h.monitor.available(), 'recovery');
    const changes = h.state.changes;

    // A task that finds the connection refused marks it unavailable at once, before any probe.
    h.state.answer = unreachable();
    h.monitor.markUnreachable('ECONNREFUSED');
    expect(h.monitor.available()).toBe(false);
    // the agent is told at once
    expect(h.state.changes).toBe(changes + 1);
    h.state.answer = { models: ['a'], features: ['tools'], runtime: 'fake', identities: new Map() };
    await until(() => h.monitor.available(), 'second recovery');
    expect(h.state.changes).toBeGreaterThan(changes);
  });

  void it('counts a probe that gets no answer in time as unreachable', async () => {
    const h = harness();
    h.state.answer = cancelledError();
    await h.start();
    expect(h.monitor.available()).toBe(false);
  });

  void it('stays available when the runtime answers with an error, keeping the models it knew', async () => {
    const h = harness();
    await h.start();
    h.state.answer = new BackendError('upstream_error', 'the upstream failed (HTTP 500)');
    const probes = h.state.probes;
    await until(() => h.state.probes > probes + 1, 'more probes');
    expect(h.monitor.available()).toBe(true);
    expect(h.monitor.models()).toEqual(['a']);
  });

  void it('probes again at once when asked', async () => {
    const h = harness([], undefined, 60_000);
    await h.start();
    const probes = h.state.probes;
    h.monitor.refreshSoon();
    await until(() => h.state.probes > probes, 'a probe');
  });
});
