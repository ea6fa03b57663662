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

  describe('version 1, read into the current shapes and written back', () => {
    const v1 = dialectOf(PREVIOUS_PROTOCOL_VERSION)!;
    const current = CURRENT_DIALECT;

    it('a task error with a code outside the fixed set is read as backend_error; one inside keeps its code', () => {
      const error = (code: string) => ({ task_address: address, seq: 3, code, message: 'runtime said no' });
      expect(v1.fromDevice.messages['task:error'].parse(error('runtime_crashed'))).toEqual(error('backend_error'));
      expect(v1.fromDevice.messages['task:error'].parse(error('context_length_exceeded'))).toEqual(
        error('context_length_exceeded'),
      );
      // From a device of the current version the same code is an invalid event.
      expect(current.fromDevice.messages['task:error'].safeParse(error('runtime_crashed')).success).toBe(false);
      expect(v1.fromDevice.messages['task:error'].safeParse(error('Not A Code')).success).toBe(false);
    });

    it('an announce may carry only the features version 1 has', () => {
      expect(v1.fromDevice.messages.announce.parse(announce)).toEqual(announce);
      const withSearch = { ...announce, features: ['tools', 'web_search'] };
      expect(v1.fromDevice.messages.announce.safeParse(withSearch).success).toBe(false);
      expect(current.fromDevice.messages.announce.safeParse(withSearch).success).toBe(true);
    });

    it('the announce ack is written without the models accepted and refused', () => {
      expect(v1.fromDevice.answers.announce(accepted)).toEqual({ ok: true, device_id: 'd-1', pool: 'network' });
      const refused: AnnounceAck = { ok: false, error: 'invalid announce payload' };
      expect(v1.fromDevice.answers.announce(refused)).toEqual(refused);
    });

    it('an assignment is written without the fields version 1 does not know', () => {
      const written = v1.toDevice.messages['task:assign']({
        ...assignment,
        params: { ...assignment.params, web_search_options: { search_context_size: 'low' } },
      });
      expect(written).toEqual({
        ...assignment,
        params: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, stop: ['\n'] },
      });
    });

    it('reads task events, cancels and assignment answers as the current version does', () => {
      const delta = { task_address: address, seq: 0, choices: [{ index: 0, content: 'hi' }] };
      expect(v1.fromDevice.messages['task:delta'].parse(delta)).toEqual(delta);
      expect(v1.toDevice.messages['task:cancel']({ task_address: address })).toEqual({ task_address: address });
      expect(v1.toDevice.answers['task:assign'].safeParse({ accepted: 'yes' }).success).toBe(false);
      expect(v1.toDevice.answers['task:assign'].parse({ accepted: false, reason: 'busy' })).toEqual({
        accepted: false,
        reason: 'busy',
      });
    });
  });
});
