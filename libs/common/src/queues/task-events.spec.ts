import { decodeStreamEntry, encodeStreamEntry } from './task-events';
import type { TaskEvent } from './task-events';

const delta: TaskEvent = { type: 'delta', choices: [{ index: 0, content: 'hi' }] };

describe('task stream entries', () => {
  it('round-trip an assignment entry, with how long its first output was held', () => {
    const fields = encodeStreamEntry(2, 5, [delta], 120.4);
    expect(fields).toEqual(['a', '2', 's', '5', 'e', JSON.stringify([delta]), 'h', '120']);
    expect(decodeStreamEntry(fields)).toEqual({ attempt: 2, seq: 5, events: [delta], heldMs: 120 });
  });

  it('leave the hold out when nothing waited, and from entries written outside an assignment', () => {
    expect(decodeStreamEntry(encodeStreamEntry(1, 1, [delta]))).toEqual({ attempt: 1, seq: 1, events: [delta] });
    expect(encodeStreamEntry(null, 0, [delta], 50)).toEqual(['e', JSON.stringify([delta])]);
  });

  it('ignore a hold that is not a positive number, and refuse an entry without events', () => {
    expect(decodeStreamEntry(['a', '1', 's', '1', 'e', '[]', 'h', 'x']).heldMs).toBeUndefined();
    expect(decodeStreamEntry(['a', '1', 's', '1', 'e', '[]', 'h', '-5']).heldMs).toBeUndefined();
    expect(() => decodeStreamEntry(['a', '1', 's', '1'])).toThrow('malformed task stream entry');
  });
});
