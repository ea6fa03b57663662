import assert from 'node:assert/strict';
import { decodeStreamEntry } from '@app/common';
import type { StreamEntry, TaskEvent } from '@app/common';
import { TaskWriter } from './task-stream.service';
import type { TaskStreamService } from './task-stream.service';

/**
 * The writer's owner with Redis replaced by a list of entries, and a switch that makes writes fail
 * (what ioredis does while Redis is unreachable).
 */
function harness(giveUpMs = 10_000) {
  const entries: StreamEntry[] = [];
  const state = { failing: false, writes: 0, expirySets: 0 };
  const owner = {
    giveUpMs,
    busy: new Set<TaskWriter>(),
    logger: { error: () => undefined },
    write: async (_taskId: string, fields: string[], setExpiry: boolean) => {
      state.writes++;
      await new Promise((r) => setTimeout(r, 5));
      if (state.failing) {
        throw new Error('Connection is closed.');
      }
      if (setExpiry) {
        state.expirySets++;
      }
      entries.push(decodeStreamEntry(fields));
    },
  } as unknown as TaskStreamService;
  return { owner, entries, state };
}

const delta = (content: string): TaskEvent => ({ type: 'delta', choices: [{ index: 0, content }] });

/** The events of the entries, checking that sequence numbers follow each other from 0. */
function contiguous(entries: StreamEntry[]): TaskEvent[] {
  let next = 0;
  const events: TaskEvent[] = [];
  for (const entry of entries) {
    assert.equal(entry.seq, next, 'entries follow each other without a gap or a repeat');
    next += entry.events.length;
    events.push(...entry.events);
  }
  return events;
}

describe('TaskWriter', () => {
  it('writes events in order; what piles up during a write goes out as one entry', async () => {
    const { owner, entries, state } = harness();
    const writer = new TaskWriter(owner, 't1', 2, null);
    writer.push({ type: 'assigned', device_id: 'd', attempt: 2 });
    await new Promise((r) => setTimeout(r, 1));
    for (let i = 0; i < 50; i++) {
      writer.push(delta(`w${i} `));
    }
    writer.push({ type: 'done', finish_reasons: ['stop'], usage: null });
    writer.push(delta('after the end'));
    await writer.flushed();
    const events = contiguous(entries);
    assert.equal(events.length, 52);
    expect(events.slice(1, 51).map((e) => (e.type === 'delta' ? e.choices[0].content : ''))).toEqual(
      Array.from({ length: 50 }, (_, i) => `w${i} `),
    );
    assert.equal(events.at(-1)!.type, 'done');
    assert.ok(entries.every((e) => e.attempt === 2));
    assert.ok(entries.length <= 3, `${entries.length} entries for 52 events`);
    assert.equal(state.expirySets, 1, 'the expiry is set with the first entry only');
    assert.equal(owner.busy.size, 0);
  });

  it('retries through an outage without losing, repeating or reordering events', async () => {
    const { owner, entries, state } = harness();
    const writer = new TaskWriter(owner, 't2', 1, null);
    writer.push(delta('a'));
    await writer.flushed();
    state.failing = true;
    for (const word of ['b', 'c', 'd']) {
      writer.push(delta(word));
      await new Promise((r) => setTimeout(r, 30));
    }
    const writesDuringOutage = state.writes;
    state.failing = false;
    writer.push(delta('e'));
    await writer.flushed();
    assert.ok(writesDuringOutage > 2, 'it kept trying');
    const text = contiguous(entries)
      .map((e) => (e.type === 'delta' ? e.choices[0].content : ''))
      .join('');
    assert.equal(text, 'abcde');
    assert.equal(state.expirySets, 2, 'the expiry is set again after the outage (Redis may have lost the stream)');
  });

  it('gives up after giveUpMs of failures and reports the loss once', async () => {
    const { owner, entries, state } = harness(200);
    let lost = 0;
    const writer = new TaskWriter(owner, 't3', 1, () => lost++);
    state.failing = true;
    writer.push(delta('x'));
    writer.push(delta('y'));
    await writer.flushed();
    assert.equal(lost, 1);
    assert.equal(entries.length, 0);
    state.failing = false;
    writer.push(delta('z'));
    await writer.flushed();
    assert.equal(entries.length, 0, 'nothing is written after giving up: the api has a gap to notice');
  });

  it('a terminal error from outside an assignment carries no attempt', async () => {
    const { owner, entries } = harness();
    const writer = new TaskWriter(owner, 't4', null, null);
    writer.push({ type: 'error', code: 'device_disconnected', message: 'gone', status: 502 });
    await writer.flushed();
    expect(entries).toEqual([
      { attempt: null, seq: 0, events: [{ type: 'error', code: 'device_disconnected', message: 'gone', status: 502 }] },
    ]);
  });
});
