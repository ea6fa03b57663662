import { PassThrough, Readable } from 'node:stream';
import { AppError } from '@app/common';
import { DISCARD_MAX_BYTES, readBody } from './request-body';

const chunks = (sizes: number[]) => Readable.from(sizes.map((n) => Buffer.alloc(n, 0x61)));

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'ok';
  } catch (error) {
    if (!(error instanceof AppError)) {
      throw new Error(String(error));
    }
    return error.code;
  }
}

describe('readBody', () => {
  it('returns a body within the limit, whole', async () => {
    const body = await readBody(chunks([10, 20, 30]), 60, 100);
    expect(body).toHaveLength(60);
    expect(await readBody(chunks([100]), NaN, 100)).toHaveLength(100);
  });

  it('reads a body over the limit to its end before refusing it (the client sees the 413, not a reset)', async () => {
    const stream = chunks([64, 64, 64, 64]);
    expect(await code(readBody(stream, 256, 100))).toBe('request_too_large');
    // the whole body was read
    expect(stream.readableEnded).toBe(true);
    const chunked = chunks([64, 64, 64]);
    expect(await code(readBody(chunked, NaN, 100))).toBe('request_too_large');
    expect(chunked.readableEnded).toBe(true);
  });

  it('refuses at once a body declared larger than the discard bound, and stops reading one that grows past it', async () => {
    const stream = new PassThrough();
    expect(await code(readBody(stream, 100 + DISCARD_MAX_BYTES + 1, 100))).toBe('request_too_large');
    const endless = new PassThrough();
    const refused = code(readBody(endless, NaN, 100));
    const piece = Buffer.alloc(1024 * 1024);
    for (let sent = 0; sent <= DISCARD_MAX_BYTES + piece.length && endless.writable; sent += piece.length) {
      endless.write(piece);
      await new Promise((r) => setImmediate(r));
    }
    expect(await refused).toBe('request_too_large');
    // it did not wait for the end
    expect(endless.readableEnded).toBe(false);
  });

  it('keeps nothing of a body for a route that takes none, and still reads it to its end', async () => {
    const stream = chunks([64, 64]);
    expect(await readBody(stream, 128, 100 + 28, false)).toHaveLength(0);
    expect(stream.readableEnded).toBe(true);
    expect(await code(readBody(chunks([64, 64, 64]), NaN, 100, false))).toBe('request_too_large');
  });

  it('a body that breaks off is a client error, not a 500', async () => {
    const stream = new PassThrough();
    const pending = code(readBody(stream, 1000, 2000));
    stream.write(Buffer.alloc(10));
    stream.destroy(new Error('aborted'));
    expect(await pending).toBe('invalid_request');
  });
});
