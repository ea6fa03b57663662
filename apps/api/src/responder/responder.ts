import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import { ERROR_STATUS } from '@app/common';
import type { ChoiceDelta, ErrorCode, FinishReason, Usage } from '@app/common';
import type { Flight } from '../flight/flight';

/** A comment line this often keeps idle SSE connections (and the proxies between) open. */
const PING_INTERVAL_MS = 15_000;
/** How often a stream that asked for it hears its queue position while it waits. */
const QUEUE_STATUS_INTERVAL_MS = 1_000;

/** Where the request waits, for `stream_options.include_queue_status`: null once it no longer waits. */
export type QueueStatusSource = () => Promise<{ position: number; etaMs: number | null } | null>;

/** The SSE comment of a queue status (OpenAI clients skip comments). */
export function queueStatusComment(status: { position: number; etaMs: number | null }): string {
  return `: queue position=${status.position}${status.etaMs === null ? '' : ` eta_ms=${status.etaMs}`}\n\n`;
}

/**
 * How one wire format (OpenAI's SSE, Ollama's NDJSON) writes an answer. Streamed: the stream opens
 * with `head`, then one piece per output event, then `finish`, or `failure` after it opened. Not
 * streamed: `collect` output, then `body` (or `errorBody`).
 */
export interface WireFormat {
  contentType: string;
  /** A keep-alive line for an idle stream, if the format has one. */
  ping: string | null;
  head(): string;
  delta(choices: ChoiceDelta[]): string | null;
  /** `choiceTokens`: with n > 1, each choice's tokens as the relay counted them (see the `done` event). */
  finish(finishReasons: FinishReason[], usage: Usage | null, choiceTokens?: number[]): string;
  failure(code: ErrorCode, status: number, message: string): string;
  /** The device took the task (durations some formats report start there). */
  assigned(): void;
  collect(choices: ChoiceDelta[]): void;
  body(finishReasons: FinishReason[], usage: Usage | null, choiceTokens?: number[]): unknown;
  errorBody(code: ErrorCode, status: number, message: string): unknown;
}

/**
 * Writes a flight's events to the client in a wire format. Nothing is sent until a device has the
 * task, so that failing to find one is still an HTTP error status; after that, a failure is an error
 * in the stream's own framing, never a silent end. A stream that asked for its queue status opens at
 * once instead, and hears where it stands every second until its first token.
 */
export async function respond(
  reply: FastifyReply,
  flight: Flight,
  format: WireFormat,
  stream: boolean,
  queueStatus?: QueueStatusSource,
): Promise<void> {
  if (!stream) {
    for await (const event of flight.events()) {
      switch (event.type) {
        case 'assigned':
          format.assigned();
          break;
        case 'delta':
          format.collect(event.choices);
          break;
        case 'done':
          await reply.code(200).send(format.body(event.finish_reasons, event.usage, event.choice_tokens));
          return;
        case 'error': {
          const status = ERROR_STATUS[event.code];
          await reply.code(status).send(format.errorBody(event.code, status, event.message));
          return;
        }
        // Vectors (`embedding`) are an embedding task's, which the embeddings service reads, never this.
        case 'requeued':
        case 'resumed':
        case 'embedding':
          break;
      }
    }
    return;
  }
  const raw = reply.raw;
  let ping: NodeJS.Timeout | null = null;
  let status: NodeJS.Timeout | null = null;
  const stopStatus = () => {
    if (status) {
      clearInterval(status);
      status = null;
    }
  };
  const open = () => {
    if (raw.headersSent) {
      return;
    }
    reply.hijack();
    raw.writeHead(200, {
      ...(reply.getHeaders() as Record<string, string>),
      'content-type': format.contentType,
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    raw.write(format.head());
    if (format.ping) {
      const line = format.ping;
      ping = setInterval(() => raw.write(line), PING_INTERVAL_MS);
    }
  };
  if (queueStatus) {
    open();
    const tell = async () => {
      const standing = flight.state === 'queued' ? await queueStatus().catch(() => null) : null;
      if (standing && status && !raw.writableEnded) {
        raw.write(queueStatusComment(standing));
      }
    };
    status = setInterval(() => void tell(), QUEUE_STATUS_INTERVAL_MS);
    void tell();
  }
  try {
    for await (const event of flight.events()) {
      switch (event.type) {
        case 'assigned':
          format.assigned();
          open();
          break;
        case 'requeued':
        case 'resumed':
        case 'embedding':
          break;
        case 'delta': {
          stopStatus();
          open();
          const piece = format.delta(event.choices);
          if (piece && !raw.write(piece)) {
            // The client reads slower than the device writes: the next events wait in the flight
            // (which stops reading the task's stream when it holds too much), not in the socket.
            await drained(raw);
          }
          break;
        }
        case 'done':
          open();
          raw.end(format.finish(event.finish_reasons, event.usage, event.choice_tokens));
          return;
        case 'error': {
          const status = ERROR_STATUS[event.code];
          if (!raw.headersSent) {
            await reply.code(status).send(format.errorBody(event.code, status, event.message));
            return;
          }
          raw.end(format.failure(event.code, status, event.message));
          return;
        }
      }
    }
    if (raw.headersSent && !raw.writableEnded) {
      raw.end();
    }
  } finally {
    stopStatus();
    if (ping) {
      clearInterval(ping);
    }
  }
}

/** Resolves once the response's buffered output has gone to the client, or the connection closed. */
function drained(raw: ServerResponse): Promise<void> {
  if (raw.destroyed || !raw.writableNeedDrain) {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const done = () => {
      raw.off('drain', done);
      raw.off('close', done);
      resolve();
    };
    raw.on('drain', done);
    raw.on('close', done);
  });
}

/**
 * Ties the flight to the client's connection: when it closes before the answer is complete, the task
 * is abandoned. Returns false when the client left while the task was being created.
 */
export function follow(reply: FastifyReply, flight: Flight): boolean {
  if (reply.raw.destroyed) {
    void flight.abandon();
    return false;
  }
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) {
      void flight.abandon();
    }
  });
  return true;
}
