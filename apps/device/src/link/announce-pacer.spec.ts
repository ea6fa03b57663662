import { ANNOUNCE_LIMITS } from '@app/common/protocol/device-protocol';
import { AGENT_ANNOUNCE_BURST, AnnouncePacer } from './announce-pacer';

/** The dispatcher's allowance as the protocol states it: a token bucket; true when the announce is accepted. */
function dispatcherBucket(start: number): (at: number) => boolean {
  let tokens: number = ANNOUNCE_LIMITS.burst;
  let last = start;
  return (at) => {
    tokens = Math.min(ANNOUNCE_LIMITS.burst, tokens + ((at - last) / 1000) * ANNOUNCE_LIMITS.perSecond);
    last = at;
    if (tokens < 1) {
      return false;
    }
    tokens -= 1;
    return true;
  };
}

describe('AnnouncePacer', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  function pacer() {
    const sent: { payload: string; at: number; answer: (a: string) => void }[] = [];
    const p = new AnnouncePacer<string, string>((payload, _timeout, settled) =>
      sent.push({ payload, at: performance.now(), answer: settled }),
    );
    return { p, sent };
  }

  it('sends a burst at once, then at most one a second, the latest state winning', () => {
    const { p, sent } = pacer();
    const answers: (string | null)[] = [];
    for (let i = 0; i < AGENT_ANNOUNCE_BURST; i++) {
      p.announce(`burst-${i}`, 1_000, () => undefined);
    }
    expect(sent).toHaveLength(AGENT_ANNOUNCE_BURST);
    p.announce('unavailable', 1_000, (a) => answers.push(`unavailable:${a}`));
    p.announce('available', 1_000, (a) => answers.push(`available:${a}`));
    expect(sent).toHaveLength(AGENT_ANNOUNCE_BURST);
    jest.advanceTimersByTime(999);
    expect(sent).toHaveLength(AGENT_ANNOUNCE_BURST);
    jest.advanceTimersByTime(1);
    expect(sent.map((s) => s.payload).at(-1)).toBe('available');
    expect(sent).toHaveLength(AGENT_ANNOUNCE_BURST + 1);
    sent.at(-1)!.answer('ok');
    expect(answers).toEqual(['unavailable:ok', 'available:ok']);
  });

  it("whatever the agent asks for, the dispatcher's rate never refuses what goes out", () => {
    const { p, sent } = pacer();
    // A runtime that changes every 50 ms for ten minutes.
    for (let t = 0; t < 600_000; t += 50) {
      p.announce(`state-${t}`, 1_000, () => undefined);
      jest.advanceTimersByTime(50);
    }
    const accepted = dispatcherBucket(sent[0].at);
    expect(sent.every((s) => accepted(s.at))).toBe(true);
    expect(sent.length).toBeLessThanOrEqual(AGENT_ANNOUNCE_BURST + 601);
  });

  it('a waiting announce is dropped with its connection, its callers answered with null', () => {
    const { p, sent } = pacer();
    const answers: (string | null)[] = [];
    for (let i = 0; i < AGENT_ANNOUNCE_BURST; i++) {
      p.announce(`burst-${i}`, 1_000, () => undefined);
    }
    p.announce('late', 1_000, (a) => answers.push(a));
    p.drop();
    jest.advanceTimersByTime(5_000);
    expect(sent).toHaveLength(AGENT_ANNOUNCE_BURST);
    expect(answers).toEqual([null]);
  });
});
