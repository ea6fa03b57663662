import { PROTOCOL_VERSION } from '@app/common';
import type { Logger } from '@app/common';
import { DeviceRegistry } from './device-registry.service';
import { DeviceServing } from './device-serving.service';
import { DeviceSession } from './device-session';
import type { DeviceSocket } from './device-session';
import type { DeviceStates } from './device-states.service';
import type { PresenceService } from './presence.service';

// In-memory collaborators (Pick<> of the real classes): each records, in one shared log, when it was used.

/** Presence whose write finishes when the test says (a Redis round trip), or never. */
class HeldPresence implements Pick<PresenceService, 'publish'> {
  private release: () => void = () => undefined;
  constructor(private readonly log: string[]) {}
  publish(): Promise<void> {
    this.log.push('presence written: start');
    return new Promise((resolve) => {
      this.release = () => {
        this.log.push('presence written');
        resolve();
      };
    });
  }
  written(): void {
    this.release();
  }
}

function setup() {
  const log: string[] = [];
  const registry = new DeviceRegistry();
  registry.listen({ onAnnounced: () => void log.push('dispatch told') } as never);
  const presence = new HeldPresence(log);
  const states = { announced: () => undefined } as unknown as DeviceStates;
  const logger = { warn: () => undefined } as unknown as Logger;
  const serving = new DeviceServing(registry, states, presence as unknown as PresenceService, logger);
  const socket = { data: { deviceId: 'device-1', orgId: null, protocol: PROTOCOL_VERSION }, connected: true };
  const session = new DeviceSession(socket as unknown as DeviceSocket);
  registry.add(session);
  return { log, registry, presence, serving, session };
}

/** Lets pending promise callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('DeviceServing', () => {
  it('acks once the presence is written, and tells the dispatch module after the ack', async () => {
    const t = setup();
    const served = t.serving.serve(t.session, ['m'], [], true, false, () => void t.log.push('ack'));
    await settle();
    // No ack yet: a request sent on it could find the device offline at an api.
    expect(t.log).toEqual(['presence written: start']);
    expect(t.session.models).toEqual(['m']);
    t.presence.written();
    await served;
    expect(t.log).toEqual(['presence written: start', 'presence written', 'ack', 'dispatch told']);
  });

  it('acks after at most a second when the presence write hangs (Redis down)', async () => {
    jest.useFakeTimers();
    try {
      const t = setup();
      const served = t.serving.serve(t.session, ['m'], [], true, false, () => void t.log.push('ack'));
      await jest.advanceTimersByTimeAsync(999);
      expect(t.log).toEqual(['presence written: start']);
      await jest.advanceTimersByTimeAsync(1);
      await served;
      expect(t.log).toEqual(['presence written: start', 'ack', 'dispatch told']);
    } finally {
      jest.useRealTimers();
    }
  });

  it('a device gone while its presence was written is not given to the dispatch module', async () => {
    const t = setup();
    const served = t.serving.serve(t.session, ['m'], [], true, false, () => void t.log.push('ack'));
    t.registry.remove(t.session);
    t.presence.written();
    await served;
    expect(t.log).toEqual(['presence written: start', 'presence written', 'ack']);
  });
});
