import type { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '@app/common';

/**
 * How much of a body beyond the limit is still read, and dropped, before the 413 goes out. A client
 * that is still sending when the server answers and closes gets a reset or EPIPE instead of the
 * answer (Node's `fetch`, and so the openai SDK, report only that); reading what it sends lets it see
 * the 413. Beyond this bound (or DISCARD_MAX_MS) the answer goes out at once: nobody is owed a
 * graceful refusal of a body this large, and the bound keeps what one request costs us small.
 */
export const DISCARD_MAX_BYTES = 64 * 1024 * 1024;
const DISCARD_MAX_MS = 10_000;

export const tooLarge = () => new AppError('request_too_large', 'The request body is too large.');

/**
 * The request body, read in full when it is at most `limit` bytes; a larger one is read up to
 * DISCARD_MAX_BYTES more and dropped, then refused with 413 `request_too_large`. With `keep` false
 * (a route that takes no body) nothing is kept: the body is read off the wire and dropped, and the
 * result is empty.
 */
export function readBody(payload: Readable, declaredLength: number, limit: number, keep = true): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    let timer: NodeJS.Timeout | undefined;
    const finish = (error: Error | null) => {
      payload.off('data', onData);
      payload.off('end', onEnd);
      payload.off('error', onError);
      payload.off('aborted', onAborted);
      clearTimeout(timer);
      if (error) {
        // Whatever else arrives is not read: Fastify closes the connection after the answer.
        payload.pause();
        reject(error);
      } else {
        resolve(keep ? Buffer.concat(chunks, received) : Buffer.alloc(0));
      }
    };
    const overLimit = () => {
      chunks.length = 0;
      timer ??= setTimeout(() => finish(tooLarge()), DISCARD_MAX_MS);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received <= limit) {
        if (keep) {
          chunks.push(chunk);
        }
        return;
      }
      overLimit();
      if (received > limit + DISCARD_MAX_BYTES) {
        finish(tooLarge());
      }
    };
    const onEnd = () => finish(received > limit ? tooLarge() : null);
    const onError = () => finish(new AppError('invalid_request', 'The request body could not be read.'));
    const onAborted = onError;

    if (declaredLength > limit + DISCARD_MAX_BYTES) {
      finish(tooLarge());
      return;
    }
    if (declaredLength > limit) {
      overLimit();
    }
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onError);
    payload.on('aborted', onAborted);
    payload.resume();
  });
}

/**
 * For a request answered before its body was read (refused in an onRequest hook: an unknown URL, a
 * missing or wrong credential). The answer goes out at once; what the client still sends is read and
 * dropped, unparsed, as readBody does beyond the limit, so that a client that reads the answer only
 * once it has sent everything gets it rather than a reset. The same bounds: a body declared larger than
 * DISCARD_MAX_BYTES is not read at all (the connection closes after the answer), and a body still
 * arriving after DISCARD_MAX_BYTES or DISCARD_MAX_MS has its connection closed. A request without a
 * body, or one fully received, keeps its connection for the next request.
 */
export function dropUnreadBody(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  if (raw.complete) {
    return;
  }
  if (Number(raw.headers['content-length']) > DISCARD_MAX_BYTES) {
    void reply.header('connection', 'close');
    return;
  }
  let dropped = 0;
  const cut = () => {
    done();
    raw.socket?.destroy();
  };
  const timer = setTimeout(cut, DISCARD_MAX_MS);
  // Nothing to wait for on shutdown: the answer has gone out.
  timer.unref();
  const onData = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > DISCARD_MAX_BYTES) {
      cut();
    }
  };
  const done = () => {
    clearTimeout(timer);
    raw.off('data', onData);
    raw.off('end', done);
    raw.off('close', done);
  };
  raw.on('data', onData);
  raw.on('end', done);
  raw.on('close', done);
}
