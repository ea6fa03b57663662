import type { z } from 'zod';

/**
 * Typed message catalogs over socket.io (the model is trigger.dev's zodSocket): one catalog per
 * direction names every event one side may send, with the schema of its message and, where the sender
 * waits for an answer, of its acknowledgement. socket.io's event maps, the handler tables and the
 * validation of what arrives are all derived from it, so an event is declared once. Knows nothing of
 * Switchyard's events (catalog.ts holds those).
 */

/** One event: the schema of its message, and of its acknowledgement when the sender waits for one. */
export interface MessageSpec {
  readonly message: z.ZodType;
  readonly ack?: z.ZodType;
}

/** Every event one side may send, by its name on the wire. */
export type MessageCatalog = Readonly<Record<string, MessageSpec>>;

/** The message of an event, as its schema gives it. */
export type MessageOf<C extends MessageCatalog, K extends keyof C> = z.output<C[K]['message']>;

/** The events of a catalog that the receiver acknowledges. */
export type AckedEvent<C extends MessageCatalog> = {
  [K in keyof C]: C[K] extends { ack: z.ZodType } ? K : never;
}[keyof C];

/** The acknowledgement of an event (never for an event without one). */
export type AckOf<C extends MessageCatalog, K extends keyof C> = C[K] extends { ack: infer A extends z.ZodType }
  ? z.output<A>
  : never;

/** socket.io's typed event map of a catalog: one listener signature per event, with its ack callback where it has one. */
export type SocketEvents<C extends MessageCatalog> = {
  [K in keyof C]: C[K] extends { ack: z.ZodType }
    ? (message: MessageOf<C, K>, ack: (answer: AckOf<C, K>) => void) => void
    : (message: MessageOf<C, K>) => void;
};

/**
 * How a receiver reads a catalog's events from a sender of some protocol version: per event, the
 * schema of what arrives, whose output is the current shape; per acknowledged event, the answer turned
 * into what that sender expects.
 */
export interface InboundMessages<C extends MessageCatalog> {
  readonly messages: { readonly [K in keyof C]: z.ZodType<MessageOf<C, K>> };
  readonly answers: { readonly [K in AckedEvent<C>]: (answer: AckOf<C, K>) => unknown };
}

/**
 * How a sender writes a catalog's events for a receiver of some protocol version: per event, the
 * current message turned into what that receiver expects; per acknowledged event, the schema of its
 * answer, whose output is the current shape.
 */
export interface OutboundMessages<C extends MessageCatalog> {
  readonly messages: { readonly [K in keyof C]: (message: MessageOf<C, K>) => unknown };
  readonly answers: { readonly [K in AckedEvent<C>]: z.ZodType<AckOf<C, K>> };
}

const same = <T>(value: T): T => value;

/** Reading a catalog from a sender of the catalog's own version: its schemas, answers as they are. */
export function inboundOf<C extends MessageCatalog>(catalog: C): InboundMessages<C> {
  const entries = Object.entries(catalog);
  return {
    messages: Object.fromEntries(entries.map(([event, spec]) => [event, spec.message])),
    answers: Object.fromEntries(entries.filter(([, spec]) => spec.ack).map(([event]) => [event, same])),
  } as InboundMessages<C>;
}

/** Writing a catalog for a receiver of the catalog's own version: messages as they are, its ack schemas. */
export function outboundOf<C extends MessageCatalog>(catalog: C): OutboundMessages<C> {
  const entries = Object.entries(catalog);
  return {
    messages: Object.fromEntries(entries.map(([event]) => [event, same])),
    answers: Object.fromEntries(entries.filter(([, spec]) => spec.ack).map(([event, spec]) => [event, spec.ack])),
  } as OutboundMessages<C>;
}

/** Answers an acknowledged event; null when its sender asked for no answer (sent no callback). */
export type MessageReply<T> = ((answer: T) => void) | null;

/**
 * What a receiver does with each event once its message passed its schema: one handler per event of
 * the catalog, so that a table missing one does not compile. `context` is the receiver's (the device
 * session, the connection), passed in so that one table serves every connection.
 */
export type MessageHandlers<C extends MessageCatalog, Context> = {
  readonly [K in keyof C]: (
    context: Context,
    message: MessageOf<C, K>,
    reply: K extends AckedEvent<C> ? MessageReply<AckOf<C, K>> : null,
  ) => void;
};

/**
 * A receiver: its handlers, and for each acknowledged event the answer to a message that fails its
 * schema (a refusal), so that the sender learns at once instead of waiting out its timeout.
 */
export interface MessageReceiver<C extends MessageCatalog, Context> {
  readonly handlers: MessageHandlers<C, Context>;
  readonly refusals: { readonly [K in AckedEvent<C>]: AckOf<C, K> };
}

/** What became of a received event: handled, not an event of the catalog, or a message that failed its schema. */
export type Receipt<C extends MessageCatalog> =
  | { readonly result: 'handled'; readonly event: keyof C & string }
  | { readonly result: 'unknown_event' }
  | { readonly result: 'malformed'; readonly event: keyof C & string; readonly problem: string };

/** What is wrong with a message that failed its schema, for the log: the first issue and where it is. */
export function schemaProblem(error: z.ZodError): string {
  const issue = error.issues[0];
  return `${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'malformed'}`;
}

/**
 * The reply to an acknowledged event, turned into what its sender's version expects; null for an
 * event without an acknowledgement or a sender that sent no callback.
 */
export function replyTo<C extends MessageCatalog, K extends keyof C & string>(
  inbound: InboundMessages<C>,
  event: K,
  ack: unknown,
): MessageReply<AckOf<C, K>> {
  const answer = (inbound.answers as Readonly<Record<string, ((answer: unknown) => unknown) | undefined>>)[event];
  if (!answer || typeof ack !== 'function') {
    return null;
  }
  return (value) => (ack as (answer: unknown) => void)(answer(value));
}

/**
 * Validates a received event and hands it to its handler. Nothing that arrives is trusted: an event
 * name outside the catalog, or a message that fails its schema, reaches no handler; the caller decides
 * what that costs the sender. An acknowledged event that fails is answered with the receiver's refusal.
 */
export function receiveMessage<C extends MessageCatalog, Context>(
  inbound: InboundMessages<C>,
  receiver: MessageReceiver<C, Context>,
  context: Context,
  event: unknown,
  message: unknown,
  ack: unknown,
): Receipt<C> {
  if (typeof event !== 'string' || !Object.hasOwn(inbound.messages, event)) {
    return { result: 'unknown_event' };
  }
  const name = event as keyof C & string;
  const reply = replyTo(inbound, name, ack) as MessageReply<unknown>;
  const parsed = (inbound.messages[name] as z.ZodType).safeParse(message);
  if (!parsed.success) {
    const refusal = (receiver.refusals as Readonly<Record<string, unknown>>)[name];
    if (reply && refusal !== undefined) {
      reply(refusal);
    }
    return { result: 'malformed', event: name, problem: schemaProblem(parsed.error) };
  }
  const handle = receiver.handlers[name] as (context: Context, message: unknown, reply: MessageReply<unknown>) => void;
  handle(context, parsed.data, reply);
  return { result: 'handled', event: name };
}
