import type { ChoiceDelta } from '@app/common/protocol/chat';
import { StopTextFilter, stopTextFilter } from './stop-text';

/** Feeds content pieces of choice 0 and returns what came out, piece by piece. */
function feed(filter: StopTextFilter, pieces: string[]): string[] {
  return pieces.flatMap((content) => filter.filter([{ index: 0, content }]).map((d) => d.content ?? ''));
}

describe('StopTextFilter (include_stop_str_in_output on runtimes without it)', () => {
  it('cuts right after the stop string, which is kept', () => {
    const filter = new StopTextFilter(['END'], 1);
    expect(feed(filter, ['Hello', ' wor', 'ld END and', ' more'])).toEqual(['Hello', ' wor', 'ld END']);
    expect(filter.done).toBe(true);
    expect(filter.result(null)).toEqual({ finish_reasons: ['stop'], usage: null });
  });

  it('finds a stop string split across pieces, holding back only what may start one', () => {
    const filter = new StopTextFilter(['</answer>'], 1);
    // "x <" may start the stop string: the "<" waits; "</ans" and "wer>" complete it.
    expect(feed(filter, ['x <', '/ans', 'wer> tail'])).toEqual(['x ', '</answer>']);
    expect(filter.done).toBe(true);
  });

  it('gives back held text when the stream ends without a stop string, with the runtime result', () => {
    const filter = new StopTextFilter(['STOP'], 1);
    expect(feed(filter, ['one ST'])).toEqual(['one ']);
    expect(filter.done).toBe(false);
    expect(filter.drain()).toEqual([{ index: 0, content: 'ST' }]);
    const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
    expect(filter.result({ finish_reasons: ['length'], usage })).toEqual({ finish_reasons: ['length'], usage });
  });

  it('takes the earliest of several stop strings', () => {
    const filter = new StopTextFilter(['zzz', 'b'], 1);
    expect(feed(filter, ['a b zzz'])).toEqual(['a b']);
  });

  it('keeps the other choices going, and other fields of a delta', () => {
    const filter = new StopTextFilter(['.'], 2);
    const out: ChoiceDelta[] = filter.filter([
      { index: 0, content: 'one. two' },
      { index: 1, content: 'three', reasoning: 'r' },
    ]);
    expect(out).toEqual([
      { index: 0, content: 'one.' },
      { index: 1, content: 'three', reasoning: 'r' },
    ]);
    expect(filter.done).toBe(false);
    expect(filter.filter([{ index: 0, content: 'ignored' }])).toEqual([]);
    expect(filter.filter([{ index: 1, content: ' four. five' }])).toEqual([{ index: 1, content: ' four.' }]);
    expect(filter.done).toBe(true);
  });

  it('is only made when the task asks for it, with stop strings', () => {
    expect(stopTextFilter({ stop: ['x'] }, 1)).toBeNull();
    expect(stopTextFilter({ include_stop_str_in_output: true }, 1)).toBeNull();
    expect(stopTextFilter({ stop: ['x'], include_stop_str_in_output: true }, 1)).toBeInstanceOf(StopTextFilter);
  });
});
