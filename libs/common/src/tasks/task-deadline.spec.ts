import { DEADLINE_MARGIN_MS, taskDeadline, taskLifetimeMs } from './task-deadline';

describe('a task deadline', () => {
  const timeouts = { QUEUE_TIMEOUT_MS: 60_000, MAX_STREAM_MS: 600_000 };

  it('is the queue timeout, plus the longest a request may last, plus a margin, from its queueing', () => {
    expect(DEADLINE_MARGIN_MS).toBe(60_000);
    expect(taskLifetimeMs(timeouts)).toBe(720_000);
    expect(taskDeadline(timeouts, 1_000)).toBe(721_000);
  });

  it('follows the settings', () => {
    expect(taskLifetimeMs({ QUEUE_TIMEOUT_MS: 1_000, MAX_STREAM_MS: 2_000 })).toBe(63_000);
  });
});
