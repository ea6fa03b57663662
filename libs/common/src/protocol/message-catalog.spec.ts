import { z } from 'zod';
import type { MessageHandlers, MessageReceiver, Receipt } from './message-catalog';
import { inboundOf, outboundOf, receiveMessage } from './message-catalog';

/** A catalog of two events, one acknowledged: the smallest that shows every path. */
const CATALOG = {
  ping: { message: z.object({ n: z.number().int() }), ack: z.object({ pong: z.number().int() }) },
  note: { message: z.object({ text: z.string().max(5) }) },
} as const;
type Catalog = typeof CATALOG;

/** A receiver that records what reached its handlers, answering `ping` with n + 1. */
function recorder() {
  const handled: [string, unknown][] = [];
  const receiver: MessageReceiver<Catalog, string> = {
    handlers: {
      ping: (context, message, reply) => {
        handled.push([context, message]);
        reply?.({ pong: message.n + 1 });
      },
      note: (context, message, reply) => {
        handled.push([context, message]);
        expect(reply).toBeNull();
      },
    },
    refusals: { ping: { pong: -1 } },
  };
  return { handled, receiver };
}

/** An ack callback as socket.io passes one, recording its answers. */
function ackRecorder() {
  const answers: unknown[] = [];
  return { answers, ack: (answer: unknown) => answers.push(answer) };
}

describe('receiveMessage', () => {
  const inbound = inboundOf(CATALOG);

  it('hands a valid message to its handler, as its schema outputs it, with a reply for an acknowledged event', () => {
    const { handled, receiver } = recorder();
    const { answers, ack } = ackRecorder();
    const receipt = receiveMessage(inbound, receiver, 'conn-1', 'ping', { n: 1, extra: 'dropped' }, ack);
    expect(receipt).toEqual<Receipt<Catalog>>({ result: 'handled', event: 'ping' });
    expect(handled).toEqual([['conn-1', { n: 1 }]]);
    expect(answers).toEqual([{ pong: 2 }]);
  });

  it('gives no reply for an event without an acknowledgement, even when the sender sent a callback', () => {
    const { handled, receiver } = recorder();
    const { answers, ack } = ackRecorder();
    expect(receiveMessage(inbound, receiver, 'c', 'note', { text: 'hi' }, ack).result).toBe('handled');
    expect(handled).toEqual([['c', { text: 'hi' }]]);
    expect(answers).toEqual([]);
  });

  it.each([['no:such'], ['toString'], ['__proto__'], [42], [null]])(
    'reaches no handler for %p, which is not an event of the catalog',
    (event) => {
      const { handled, receiver } = recorder();
      expect(receiveMessage(inbound, receiver, 'c', event, { n: 1 }, undefined)).toEqual({ result: 'unknown_event' });
      expect(handled).toEqual([]);
    },
  );

  it('reaches no handler for a message that fails its schema, and says why', () => {
    const { handled, receiver } = recorder();
    const receipt = receiveMessage(inbound, receiver, 'c', 'note', { text: 'far too long' }, undefined);
    expect(receipt).toMatchObject({ result: 'malformed', event: 'note' });
    expect((receipt as { problem: string }).problem).toMatch(/^text: /);
    expect(handled).toEqual([]);
  });

  it('answers an acknowledged event that fails its schema with the receiver’s refusal, at once', () => {
    const { handled, receiver } = recorder();
    const { answers, ack } = ackRecorder();
    expect(receiveMessage(inbound, receiver, 'c', 'ping', { n: 'one' }, ack).result).toBe('malformed');
    expect(handled).toEqual([]);
    expect(answers).toEqual([{ pong: -1 }]);
  });

  it('passes a null reply when the sender of an acknowledged event sent no callback', () => {
    const replies: unknown[] = [];
    const receiver: MessageReceiver<Catalog, null> = {
      handlers: { ping: (_c, _m, reply) => replies.push(reply), note: () => undefined },
      refusals: { ping: { pong: -1 } },
    };
    expect(receiveMessage(inbound, receiver, null, 'ping', { n: 1 }, 'not a function').result).toBe('handled');
    expect(replies).toEqual([null]);
  });

  it('reads with the schemas of another version and answers in its shape', () => {
    // A sender of an older version: `n` as a string, and an answer it knows as `p`.
    const older = {
      messages: { ...inbound.messages, ping: z.object({ n: z.string() }).transform(({ n }) => ({ n: Number(n) })) },
      answers: { ping: (answer: { pong: number }) => ({ p: answer.pong }) },
    };
    const { handled, receiver } = recorder();
    const { answers, ack } = ackRecorder();
    expect(receiveMessage(older, receiver, 'c', 'ping', { n: '41' }, ack).result).toBe('handled');
    expect(handled).toEqual([['c', { n: 41 }]]);
    expect(answers).toEqual([{ p: 42 }]);
  });

  it('a handler table must handle every event of its catalog', () => {
    // @ts-expect-error: `note` has no handler (the typecheck fails if this compiles).
    const missing: MessageHandlers<Catalog, null> = { ping: () => undefined };
    expect(Object.keys(missing)).toEqual(['ping']);
  });
});

describe('outboundOf', () => {
  it('writes messages as they are and reads answers with the catalog’s ack schemas', () => {
    const outbound = outboundOf(CATALOG);
    expect(outbound.messages.note({ text: 'hi' })).toEqual({ text: 'hi' });
    expect(Object.keys(outbound.answers)).toEqual(['ping']);
    expect(outbound.answers.ping.safeParse({ pong: 1 }).success).toBe(true);
    expect(outbound.answers.ping.safeParse({ pong: 'x' }).success).toBe(false);
  });
});
