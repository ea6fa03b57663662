import type { Readable } from 'node:stream';
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
 * DISCARD_MAX_BYTES more and dropped, then refused with 413 `request_too_large`.
 */
export function readBody(payload: Readable, declaredLength: number, limit: number): Promise<Buffer> {
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
        resolve(Buffer.concat(chunks, received));
      }
    };
    const overLimit = () => {
      chunks.length = 0;
      timer ??= setTimeout(() => finish(tooLarge()), DISCARD_MAX_MS);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received <= limit) {
        chunks.push(chunk);
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
