import type { AnnounceAck, AssignPayload } from './messages';
import { CURRENT_DIALECT, DEVICE_EVENTS, DEVICE_TO_SERVER, PROTOCOL_VERSION, SERVER_TO_DEVICE } from './catalog';
import { PREVIOUS_PROTOCOL_VERSION, SERVED_PROTOCOL_VERSIONS, dialectOf } from './versions';

const address = 'network:7e201815-713d-4c94-a4ed-3311b59c8976';
const announce = {
  agent_version: 'old-1',
  backend: 'sim',
  models: ['m'],
  features: ['tools'],
  available: true,
  running_task: null,
};
const accepted: AnnounceAck = { ok: true, device_id: 'd-1', pool: 'network', models: ['m'], refused: [] };
const assignment: AssignPayload = {
  task_address: address,
  model: 'm',
  attempt: 1,
  params: {
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 8,
    stop: ['\n'],
    include_stop_str_in_output: true,
  },
};

describe('the device protocol catalog', () => {
  it('derives the event names of both directions from the catalog', () => {
    expect(DEVICE_EVENTS).toEqual({
      assign: 'task:assign',
      cancel: 'task:cancel',
      announce: 'announce',
      delta: 'task:delta',
      embedding: 'task:embedding',
      done: 'task:done',
      error: 'task:error',
    });
    expect(Object.values(DEVICE_EVENTS).sort()).toEqual(
      [...Object.keys(SERVER_TO_DEVICE), ...Object.keys(DEVICE_TO_SERVER)].sort(),
    );
  });

  it('the current dialect reads and writes the catalog as it is', () => {
    expect(CURRENT_DIALECT.version).toBe(PROTOCOL_VERSION);
    for (const [event, spec] of Object.entries(DEVICE_TO_SERVER)) {
      expect(CURRENT_DIALECT.fromDevice.messages[event as keyof typeof DEVICE_TO_SERVER]).toBe(spec.message);
    }
    expect(CURRENT_DIALECT.fromDevice.answers.announce(accepted)).toBe(accepted);
    expect(CURRENT_DIALECT.toDevice.messages['task:assign'](assignment)).toBe(assignment);
    expect(CURRENT_DIALECT.toDevice.answers['task:assign']).toBe(SERVER_TO_DEVICE['task:assign'].ack);
  });
});

describe('protocol versions', () => {
  it('a dispatcher serves the current version and the one before, and no other', () => {
    expect(SERVED_PROTOCOL_VERSIONS).toEqual([PROTOCOL_VERSION, PROTOCOL_VERSION - 1]);
    expect(dialectOf(PROTOCOL_VERSION)).toBe(CURRENT_DIALECT);
    expect(dialectOf(PREVIOUS_PROTOCOL_VERSION)?.version).toBe(PREVIOUS_PROTOCOL_VERSION);
    for (const version of [0, PROTOCOL_VERSION + 1, -1, 1.5]) {
      expect(dialectOf(version)).toBeNull();
    }
  });

  describe('version 2, read into the current shapes and written back', () => {
    const v2 = dialectOf(PREVIOUS_PROTOCOL_VERSION)!;
    const current = CURRENT_DIALECT;

    it('an announce without identities is read as one that says nothing of its models', () => {
      expect(v2.fromDevice.messages.announce.parse(announce)).toEqual({ ...announce, identities: [] });
      // From a device of the current version the same announce lacks a field it must have.
      expect(current.fromDevice.messages.announce.safeParse(announce).success).toBe(false);
      expect(current.fromDevice.messages.announce.parse({ ...announce, identities: [] })).toEqual({
        ...announce,
        identities: [],
      });
    });

    it('the announce ack writes the refusals version 2 does not know (digests, quarantine) as not_allowed', () => {
      const refusing: AnnounceAck = {
        ...accepted,
        models: [],
        refused: [
          { model: 'a', reason: 'digest_mismatch' },
          { model: 'b', reason: 'digest_unknown' },
          { model: 'c', reason: 'not_network' },
          { model: 'd', reason: 'quarantined' },
        ],
      };
      const written = v2.fromDevice.answers.announce(refusing);
      expect(written).toEqual({
        ...refusing,
        refused: [
          { model: 'a', reason: 'not_allowed' },
          { model: 'b', reason: 'not_allowed' },
          { model: 'c', reason: 'not_network' },
          { model: 'd', reason: 'not_allowed' },
        ],
      });
      const refused: AnnounceAck = { ok: false, error: 'invalid announce payload' };
      expect(v2.fromDevice.answers.announce(refused)).toEqual(refused);
    });

    it('reads task events and writes assignments, cancels and their answers as the current version does', () => {
      const delta = { task_address: address, seq: 0, choices: [{ index: 0, content: 'hi' }] };
      expect(v2.fromDevice.messages['task:delta'].parse(delta)).toEqual(delta);
      const error = { task_address: address, seq: 3, code: 'runtime_crashed', message: 'runtime said no' };
      expect(v2.fromDevice.messages['task:error'].safeParse(error).success).toBe(false);
      expect(v2.toDevice.messages['task:assign'](assignment)).toBe(assignment);
      expect(v2.toDevice.messages['task:cancel']({ task_address: address })).toEqual({ task_address: address });
      expect(v2.toDevice.answers['task:assign'].safeParse({ accepted: 'yes' }).success).toBe(false);
    });
  });
});
