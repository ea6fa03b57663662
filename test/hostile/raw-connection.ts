import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { sleep } from '../support/stack';

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
  body: any;
}

/**
 * An HTTP/1.1 connection written by hand: the test sends whatever bytes it wants, when it wants (a
 * head without its body, a body in pieces, headers one at a time), and reads each answer as it
 * arrives, so that it can tell what the server answered before the client was done.
 */
export class RawConnection {
  private received = Buffer.alloc(0);
  private ended = false;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => (this.received = Buffer.concat([this.received, chunk])));
    socket.on('close', () => (this.ended = true));
    socket.on('error', () => (this.ended = true));
  }

  static open(url: string, localAddress?: string): Promise<RawConnection> {
    const target = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connect({ host: target.hostname, port: Number(target.port), localAddress });
      socket.once('connect', () => resolve(new RawConnection(socket)));
      socket.once('error', reject);
    });
  }

  /**
   * Sends bytes; resolves once they are handed to the kernel (at once when the server closed), fails
   * when the server stops reading for `timeoutMs`.
   */
  write(data: string | Buffer, timeoutMs = 20_000): Promise<void> {
    if (this.ended || this.socket.destroyed) {
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the server read nothing for ${timeoutMs} ms`)), timeoutMs);
      this.socket.write(data, () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** The next whole answer (a body with a Content-Length), or a failure naming `what` after `timeoutMs`. */
  async answer(what: string, timeoutMs = 20_000): Promise<RawAnswer> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const end = this.received.indexOf('\r\n\r\n');
      if (end >= 0) {
        const [statusLine, ...lines] = this.received.subarray(0, end).toString('latin1').split('\r\n');
        const headers = Object.fromEntries(
          lines.map((line) => [
            line.slice(0, line.indexOf(':')).toLowerCase(),
            line.slice(line.indexOf(':') + 1).trim(),
          ]),
        );
        const length = Number(headers['content-length'] ?? 0);
        if (this.received.length >= end + 4 + length) {
          const text = this.received.subarray(end + 4, end + 4 + length).toString('utf8');
          this.received = this.received.subarray(end + 4 + length);
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = undefined;
          }
          return { status: Number(statusLine.split(' ')[1]), headers, text, body };
        }
      }
      if (this.ended) {
        throw new Error(`${what}: the server closed the connection without a whole answer`);
      }
      if (Date.now() > deadline) {
        throw new Error(`${what}: no answer within ${timeoutMs} ms`);
      }
      await sleep(10);
    }
  }

  /** Resolves with how long it took once the server closed the connection; fails after `timeoutMs`. */
  async closedWithin(timeoutMs: number): Promise<number> {
    const started = Date.now();
    while (!this.ended) {
      if (Date.now() - started > timeoutMs) {
        throw new Error(`the server kept the connection open for more than ${timeoutMs} ms`);
      }
      await sleep(50);
    }
    return Date.now() - started;
  }

  destroy(): void {
    this.socket.destroy();
  }
}
