import type { AssignPayload } from '@app/common/protocol/device-protocol';
import type { DispatcherLink } from '../link/dispatcher-link';
import { runningTask, stopBackend } from './running-task';

const payload = {
  task_address: 'network:6f1c2a44-5b9e-4d3a-9a7e-1c2d3e4f5a6b',
  model: 'm',
  attempt: 1,
  params: { messages: [{ role: 'user', content: 'hi' }] },
} as unknown as AssignPayload;
const connection = {} as DispatcherLink['connection'];

describe('stopping a task’s backend', () => {
  it('aborts the signal of a backend that still runs (a cancel, a disconnect, a shutdown)', () => {
    const task = runningTask(payload, connection, false);
    stopBackend(task);
    expect(task.controller.signal.aborted).toBe(true);
  });

  it('leaves the signal of a backend that returned or threw alone', () => {
    const task = runningTask(payload, connection, false);
    task.settled = true;
    stopBackend(task);
    expect(task.controller.signal.aborted).toBe(false);
  });
});
