import { PREVIOUS_PROTOCOL_VERSION, PROTOCOL_VERSION } from '@app/common';
import type { AssignAck, AssignPayload } from '@app/common';
import { DeviceSession } from './device-session';
import type { DeviceAnswer, DeviceSocket } from './device-session';

const address = 'network:7e201815-713d-4c94-a4ed-3311b59c8976';
const assignment: AssignPayload = {
  task_address: address,
  model: 'm',
  attempt: 1,
  params: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, include_stop_str_in_output: true },
};

/**
 * A socket.io server socket as far as a session uses it: who it is, what it was sent, and the device's
 * answer to an acknowledged event (`undefined`: none within the timeout), given as socket.io gives it.
 */
function fakeSocket(protocol: number, answer?: unknown) {
  const sent: unknown[][] = [];
  const emit = (...args: unknown[]) => {
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      sent.push(args.slice(0, -1));
      callback(answer === undefined ? new Error('operation has timed out') : null, answer);
    } else {
      sent.push(args);
    }
    return true;
  };
  const socket = {
    data: { deviceId: 'device-1', orgId: null, protocol },
    connected: true,
    emit,
    timeout: () => ({ emit }),
  };
  return { socket: socket as unknown as DeviceSocket, sent };
}

/** What `request` answered for an assignment. */
function assign(session: DeviceSession): DeviceAnswer<AssignAck> {
  let result: DeviceAnswer<AssignAck> | null = null;
  session.request('task:assign', assignment, 1_000, (answer) => (result = answer));
  return result!;
}

describe('DeviceSession', () => {
  it('reads a valid answer of the device', () => {
    const { socket } = fakeSocket(PROTOCOL_VERSION, { accepted: false, reason: 'busy' });
    expect(assign(new DeviceSession(socket))).toEqual({ ok: true, answer: { accepted: false, reason: 'busy' } });
  });

  it.each([[{ accepted: 'yes' }], [{ accepted: false, reason: 'x'.repeat(201) }], ['ok'], [null]])(
    'does not trust an answer that fails its schema (%p)',
    (answer) => {
      const { socket } = fakeSocket(PROTOCOL_VERSION, answer);
      expect(assign(new DeviceSession(socket))).toMatchObject({ ok: false, reason: 'malformed' });
    },
  );

  it('reports no answer when none came in time', () => {
    const { socket } = fakeSocket(PROTOCOL_VERSION);
    expect(assign(new DeviceSession(socket))).toEqual({ ok: false, reason: 'no_answer' });
  });

  it('writes what it sends in the device’s version', () => {
    const current = fakeSocket(PROTOCOL_VERSION, { accepted: true });
    assign(new DeviceSession(current.socket));
    expect(current.sent).toEqual([['task:assign', assignment]]);

    const previous = fakeSocket(PREVIOUS_PROTOCOL_VERSION, { accepted: true });
    const session = new DeviceSession(previous.socket);
    expect(session.dialect.version).toBe(PREVIOUS_PROTOCOL_VERSION);
    expect(assign(session)).toEqual({ ok: true, answer: { accepted: true } });
    session.send('task:cancel', { task_address: address });
    // Version 2's assignment and cancel are the current ones (versions.spec.ts has what differs).
    expect(previous.sent).toEqual([
      ['task:assign', assignment],
      ['task:cancel', { task_address: address }],
    ]);
  });

  it('refuses to exist for a version the dispatcher does not serve', () => {
    expect(() => new DeviceSession(fakeSocket(PROTOCOL_VERSION + 1).socket)).toThrow(/unserved protocol version/);
  });
});
