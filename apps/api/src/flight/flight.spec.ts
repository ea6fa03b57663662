import type { EndGuard, Ending, TaskEvent } from '@app/common';
import { FLIGHT_BUFFER_BYTES, Flight } from './flight';
import type { FlightHooks, FlightState } from './flight';

/** Hooks that record what the flight asked for; `ends` says what the repository answers. */
function hooks(ends: (guard: EndGuard) => boolean = () => true) {
  const calls = {
    ended: [] as { ending: Ending; guard: EndGuard }[],
    withdrawn: [] as boolean[],
    changes: [] as { from: FlightState; to: FlightState; outcome: string | null }[],
    flows: [] as boolean[],
  };
  const impl: FlightHooks = {
    endTask: async (_f, ending, guard) => {
      calls.ended.push({ ending, guard });
      return ends(guard);
    },
    withdraw: async (_f, waiting) => {
      calls.withdrawn.push(waiting);
    },
    changed: (f, from, outcome) => calls.changes.push({ from, to: f.state, outcome }),
    flow: (_f, reading) => calls.flows.push(reading),
  };
  return { impl, calls };
}

const task = {
  taskId: 't',
  address: 'network:t',
  mode: 'network' as const,
  model: 'm',
  line: 'l',
  api: 'openai' as const,
  resume: true,
};
const timeouts = { queueMs: 1_000, idleMs: 2_000, streamMs: 10_000 };

async function drain(flight: Flight): Promise<TaskEvent[]> {
  const out: TaskEvent[] = [];
  for await (const event of flight.events()) {
    out.push(event);
  }
  return out;
}

const entry = (attempt: number | null, seq: number, events: TaskEvent[]) => ({ attempt, seq, events });
const delta = (content: string): TaskEvent => ({ type: 'delta', choices: [{ index: 0, content }] });

describe('Flight', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('dates output held by the dispatcher back by its heldMs (time to first token, tokens/s)', () => {
    const flight = new Flight(task, timeouts, hooks().impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    const now = performance.now();
    flight.onEntry({
      ...entry(1, 1, [delta('a'), { type: 'done', finish_reasons: ['stop'], usage: null }]),
      heldMs: 250,
    });
    expect(flight.firstOutputAt).not.toBeNull();
    expect(now - (flight.firstOutputAt ?? now)).toBeGreaterThanOrEqual(249);
  });

  it('goes queued → assigned → streaming → ended, and hands the events over in order', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    flight.onEntry(entry(1, 1, [delta('a'), delta('b')]));
    flight.onEntry(entry(1, 3, [{ type: 'done', finish_reasons: ['stop'], usage: null }]));
    expect((await drain(flight)).map((e) => e.type)).toEqual(['assigned', 'delta', 'delta', 'done']);
    expect(calls.changes).toEqual([
      { from: 'queued', to: 'assigned', outcome: null },
      { from: 'assigned', to: 'streaming', outcome: null },
      { from: 'streaming', to: 'ended', outcome: 'completed' },
    ]);
    expect(calls.ended).toEqual([]);
  });

  it('drops repeated entries and older attempts; a gap ends the task with relay_interrupted', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }, delta('a')]));
    flight.onEntry(entry(1, 1, [delta('a')]));
    flight.onEntry(entry(0, 0, [delta('old')]));
    flight.onEntry(entry(1, 5, [delta('after a gap')]));
    await jest.runOnlyPendingTimersAsync();
    const events = await drain(flight);
    expect(events.filter((e) => e.type === 'delta')).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'error', code: 'relay_interrupted' });
    expect(calls.ended[0]).toMatchObject({
      ending: { status: 'failed', errorCode: 'relay_interrupted' },
      guard: 'any',
    });
  });

  it('a resumed task: the next attempt continues the same answer, and the client gets one whole stream', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd1', attempt: 1 }]));
    flight.onEntry(entry(1, 1, [delta('Hel')]));
    flight.onEntry(entry(1, 2, [{ type: 'resumed', reason: 'device_disconnected' }]));
    expect(flight.state).toBe('queued');
    flight.onEntry(entry(2, 0, [{ type: 'assigned', device_id: 'd2', attempt: 2 }]));
    flight.onEntry(entry(2, 1, [delta('lo'), { type: 'done', finish_reasons: ['stop'], usage: null }]));
    const events = await drain(flight);
    expect(
      events.filter((e) => e.type === 'delta').map((e) => (e.type === 'delta' ? e.choices[0].content : '')),
    ).toEqual(['Hel', 'lo']);
    expect(events.at(-1)).toMatchObject({ type: 'done' });
    expect(events.filter((e) => e.type === 'resumed')).toHaveLength(1);
    expect(calls.changes.at(-1)).toMatchObject({ to: 'ended', outcome: 'completed' });
  });

  it('a resumed task waits for its next device under the queue timeout, not the idle one', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd1', attempt: 1 }]));
    flight.onEntry(entry(1, 1, [delta('Hel'), { type: 'resumed', reason: 'device_timeout' }]));
    await jest.advanceTimersByTimeAsync(timeouts.queueMs + 1);
    expect(calls.ended.at(-1)).toMatchObject({ ending: { errorCode: 'queue_timeout' }, guard: 'queued' });
  });

  it('a later attempt after output reached the client ends it with device_disconnected', async () => {
    const { impl } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }, delta('a')]));
    flight.onEntry(entry(2, 0, [{ type: 'assigned', device_id: 'e', attempt: 2 }]));
    await jest.runOnlyPendingTimersAsync();
    expect((await drain(flight)).at(-1)).toMatchObject({ type: 'error', code: 'device_disconnected' });
  });

  it('a requeue before any output goes back to queued, and the next attempt starts over', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    flight.onEntry(entry(1, 1, [{ type: 'requeued', reason: 'device_disconnected' }]));
    expect(flight.state).toBe('queued');
    flight.onEntry(entry(2, 0, [{ type: 'assigned', device_id: 'e', attempt: 2 }, delta('x')]));
    flight.onEntry(entry(2, 2, [{ type: 'done', finish_reasons: ['stop'], usage: null }]));
    expect((await drain(flight)).map((e) => e.type)).toEqual(['assigned', 'requeued', 'assigned', 'delta', 'done']);
    expect(calls.changes.map((c) => c.to)).toEqual(['assigned', 'queued', 'assigned', 'streaming', 'ended']);
  });

  it('the queue timeout ends a waiting task only while it waits, and withdraws its job', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    jest.advanceTimersByTime(timeouts.queueMs);
    await jest.runOnlyPendingTimersAsync();
    const events = await drain(flight);
    expect(events).toEqual([expect.objectContaining({ type: 'error', code: 'queue_timeout' })]);
    expect(calls.ended[0]).toMatchObject({
      ending: { status: 'timed_out', errorCode: 'queue_timeout' },
      guard: 'queued',
    });
    expect(calls.withdrawn).toEqual([true]);
  });

  it('a queue timeout that loses the race to a device leaves the flight going', async () => {
    const { impl } = hooks((guard) => guard !== 'queued');
    const flight = new Flight(task, timeouts, impl);
    jest.advanceTimersByTime(timeouts.queueMs);
    await Promise.resolve();
    await Promise.resolve();
    expect(flight.ended).toBe(false);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    expect(flight.state).toBe('assigned');
    flight.stopTimers();
  });

  it('a silent device: device_timeout after the idle time, every event resets it', async () => {
    const { impl } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    jest.advanceTimersByTime(timeouts.idleMs - 1);
    flight.onEntry(entry(1, 1, [delta('still here')]));
    jest.advanceTimersByTime(timeouts.idleMs - 1);
    expect(flight.ended).toBe(false);
    jest.advanceTimersByTime(1);
    await jest.runOnlyPendingTimersAsync();
    expect((await drain(flight)).at(-1)).toMatchObject({ type: 'error', code: 'device_timeout' });
  });

  it('a task whose ending never arrived (its state already terminal) ends with relay_interrupted', async () => {
    const { impl } = hooks(() => false);
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    jest.advanceTimersByTime(timeouts.idleMs);
    await jest.runOnlyPendingTimersAsync();
    expect((await drain(flight)).at(-1)).toMatchObject({ type: 'error', code: 'relay_interrupted' });
  });

  it('the client going away: a waiting task ends cancelled and its job is withdrawn; a running one is stopped', async () => {
    const waiting = hooks();
    const queued = new Flight(task, timeouts, waiting.impl);
    await queued.abandon();
    expect(waiting.calls.ended[0]).toMatchObject({ ending: { status: 'cancelled' }, guard: 'queued' });
    expect(waiting.calls.withdrawn).toEqual([true]);
    expect(await drain(queued)).toEqual([]);

    const running = hooks();
    const assigned = new Flight(task, timeouts, running.impl);
    assigned.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    await assigned.abandon();
    expect(running.calls.ended).toEqual([]);
    expect(running.calls.withdrawn).toEqual([false]);
    expect(running.calls.changes.at(-1)).toMatchObject({ to: 'ended', outcome: 'cancelled' });
  });

  it('a client slower than its device holds the stream past the buffer bound, and is not blamed on the device', async () => {
    const { impl, calls } = hooks();
    const flight = new Flight(task, timeouts, impl);
    flight.onEntry(entry(1, 0, [{ type: 'assigned', device_id: 'd', attempt: 1 }]));
    const piece = 'x'.repeat(16 * 1024);
    const pieces = Math.ceil(FLIGHT_BUFFER_BYTES / piece.length) + 1;
    for (let i = 0; i < pieces; i++) {
      flight.onEntry(entry(1, 1 + i, [delta(piece)]));
    }
    expect(calls.flows).toEqual([false]);
    // The device is not read meanwhile: its silence is not a timeout.
    await jest.advanceTimersByTimeAsync(timeouts.idleMs * 3);
    expect(flight.state).toBe('streaming');

    const events = flight.events();
    let taken = 0;
    while (calls.flows.length < 2) {
      await events.next();
      taken++;
    }
    expect(calls.flows).toEqual([false, true]);
    // Reading again once the client took about half of what was held.
    expect(taken).toBeGreaterThan(pieces / 2 - 2);
    expect(taken).toBeLessThan(pieces);
    // From then on the device's silence counts again.
    await jest.advanceTimersByTimeAsync(timeouts.idleMs);
    expect(flight.state).toBe('ended');
    expect(calls.ended.at(-1)?.ending).toMatchObject({ errorCode: 'device_timeout' });
    await events.return(undefined);
  });
});
