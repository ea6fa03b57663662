import type { AssignPayload, ChatAssignPayload, EmbedAssignPayload } from '@app/common/protocol/device-protocol';
import type { DispatcherLink } from '../link/dispatcher-link';
import { RunningTask } from './running-task';

const payload = {
  task_address: 'network:6f1c2a44-5b9e-4d3a-9a7e-1c2d3e4f5a6b',
  model: 'm',
  attempt: 1,
  params: { messages: [{ role: 'user', content: 'hi' }] },
} as unknown as ChatAssignPayload;
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

  it('logs an embedding task with its counts, and its inputs with --log-content only', () => {
    const embed: EmbedAssignPayload = {
      task_address: payload.task_address,
      model: 'm',
      attempt: 1,
      kind: 'embed',
      embed: { input: ['a text', 'another'] },
    };
    const task = new RunningTask(embed, connection, false);
    expect(task.kind).toBe('embed');
    task.recordVectors(768);
    task.recordEmbeddingEvent();
    const line = task.logLine('completed', { usage: { prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 } });
    expect(line).toMatchObject({
      kind: 'embed',
      outcome: 'completed',
      prompt_tokens: 3,
      inputs: 2,
      dimensions: 768,
      events: 1,
    });
    expect(line.runtime_ms).toEqual(expect.any(Number));
    expect(line).not.toHaveProperty('input');
    expect(line).not.toHaveProperty('finish_reasons');
    expect(new RunningTask(embed, connection, true).logLine('failed', { error_code: 'upstream_error' })).toMatchObject({
      input: ['a text', 'another'],
      dimensions: null,
      events: 0,
      error_code: 'upstream_error',
    });
    expect(new RunningTask(payload, connection, false).logLine('completed', {})).toMatchObject({ kind: 'chat' });
  });
});
