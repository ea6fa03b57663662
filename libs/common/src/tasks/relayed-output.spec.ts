import { createHash } from 'node:crypto';
import type { TaskEvent } from '../queues/task-events';
import { relayedOutput } from './relayed-output';
import type { TimedEntry } from './relayed-output';

const at = (ms: number, attempt: number | null, seq: number, events: TaskEvent[]): TimedEntry => ({
  id: `${ms}-0`,
  entry: { attempt, seq, events },
});
const delta = (content: string): TaskEvent => ({ type: 'delta', choices: [{ index: 0, content }] });
const sha = (text: string) => createHash('sha256').update(text).digest('hex');

describe('relayedOutput (what a client has of a task, read from its stream as the api reads it)', () => {
  it('joins the attempts across resumes, with a segment per device that produced output', () => {
    const out = relayedOutput([
      at(1_000, 1, 0, [{ type: 'assigned', device_id: 'd1', attempt: 1 }]),
      at(1_010, 1, 1, [delta('The '), delta('quick ')]),
      // A write retried after a Redis failure: its events are dropped as the api drops them.
      at(1_011, 1, 3, [delta('brown')]),
      at(1_012, 1, 3, [delta('brown')]),
      at(1_020, 1, 4, [{ type: 'resumed', reason: 'device_disconnected' }]),
      at(2_000, 2, 0, [{ type: 'assigned', device_id: 'd2', attempt: 2 }]),
      at(2_010, 2, 1, [delta(' fox')]),
      at(2_020, null, 0, [{ type: 'resumed', reason: 'dispatcher_lost' }]),
    ]);
    expect(out.text).toBe('The quick brown fox');
    expect(out.tokens).toBe(4);
    expect(out.continuable).toBe(true);
    expect(out.segments).toEqual([
      {
        attempt: 1,
        device_id: 'd1',
        assigned_at: new Date(1_000).toISOString(),
        first_output_at: new Date(1_010).toISOString(),
        last_output_at: new Date(1_011).toISOString(),
        tokens: 3,
        bytes: 15,
        sha256: sha('The quick brown'),
        ended: 'device_disconnected',
      },
      expect.objectContaining({
        attempt: 2,
        device_id: 'd2',
        tokens: 1,
        sha256: sha(' fox'),
        ended: 'dispatcher_lost',
      }),
    ]);
  });

  it('an attempt requeued before output leaves no segment', () => {
    const out = relayedOutput([
      at(1, 1, 0, [{ type: 'assigned', device_id: 'd1', attempt: 1 }]),
      at(2, 1, 1, [{ type: 'requeued', reason: 'refused' }]),
      at(3, 2, 0, [{ type: 'assigned', device_id: 'd2', attempt: 2 }, delta('hi')]),
      at(4, 2, 2, [{ type: 'resumed', reason: 'device_timeout' }]),
    ]);
    expect(out.segments.map((s) => [s.device_id, s.ended])).toEqual([['d2', 'device_timeout']]);
  });

  it('cannot be continued after a tool call, reasoning, a gap, or an ending', () => {
    const call = { id: 'c', type: 'function' as const, function: { name: 'f', arguments: '{}' } };
    const cases: TaskEvent[][] = [
      [{ type: 'delta', choices: [{ index: 0, tool_calls: [call] }] }],
      [{ type: 'delta', choices: [{ index: 0, reasoning: 'hmm' }] }],
      [{ type: 'error', code: 'device_disconnected', message: 'gone' }],
    ];
    for (const events of cases) {
      expect(
        relayedOutput([at(1, 1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]), at(2, 1, 1, events)])
          .continuable,
      ).toBe(false);
    }
    // Sequence 1 never arrived: a gap.
    expect(
      relayedOutput([at(1, 1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]), at(2, 1, 2, [delta('x')])])
        .continuable,
    ).toBe(false);
  });
});
