import type { AssignPayload } from '@app/common/protocol/device-protocol';
import type { DispatcherLink } from '../link/dispatcher-link';
import { RunningTask } from './running-task';

const payload = {
  task_address: 'network:6f1c2a44-5b9e-4d3a-9a7e-1c2d3e4f5a6b',
  model: 'm',
  attempt: 1,
  params: { messages: [{ role: 'user', content: 'hi' }] },
} as unknown as AssignPayload;
const connection = {} as DispatcherLink['connection'];

describe('RunningTask', () => {
  it('aborts the signal of a backend that still runs (a cancel, a disconnect, a shutdown)', () => {
    const task = new RunningTask(payload, connection, false);
    task.stopBackend();
    expect(task.signal.aborted).toBe(true);
  });

  it('leaves the signal of a backend that returned or threw alone', () => {
    const task = new RunningTask(payload, connection, false);
    task.settle();
    task.stopBackend();
    expect(task.signal.aborted).toBe(false);
  });

  it('numbers its events from 0, and logs its deltas, and its content only with --log-content', () => {
    const quiet = new RunningTask(payload, connection, false);
    expect(quiet.seq).toBe(0);
    quiet.sent();
    quiet.sent();
    expect(quiet.seq).toBe(2);
    quiet.recordDelta([{ index: 0, content: 'a' }]);
    expect(quiet.logLine('completed', {})).toMatchObject({ deltas: 1, outcome: 'completed' });
    expect(quiet.logLine('completed', {})).not.toHaveProperty('completion');

    const verbose = new RunningTask(payload, connection, true);
    verbose.recordDelta([{ index: 0, content: 'he' }]);
    verbose.recordDelta([{ index: 0, content: 'llo', reasoning: 'r' }]);
    expect(verbose.logLine('completed', {}).completion).toEqual([{ content: 'hello', reasoning: 'r', tool_calls: [] }]);
    expect(verbose.logLine('completed', {})).not.toHaveProperty('assistant_prefix');
  });

  it('logs a resumed task’s answer so far with its prompt, with --log-content only', () => {
    const resumed = { ...payload, params: { ...payload.params, assistant_prefix: 'The Rhine' } } as AssignPayload;
    expect(new RunningTask(resumed, connection, true).logLine('completed', {})).toMatchObject({
      assistant_prefix: 'The Rhine',
    });
    expect(new RunningTask(resumed, connection, false).logLine('completed', {})).not.toHaveProperty('assistant_prefix');
  });
});
