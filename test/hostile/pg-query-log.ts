import { TcpProxy, databaseTarget, databaseUrlVia } from '../reliability/helpers';

/** Startup-phase requests that the server answers with one byte, after which a startup message follows. */
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;

/**
 * Reads the frontend side of the Postgres wire protocol and calls `onQuery` with the text of each
 * statement: Parse (`P`, the extended protocol node-postgres uses for queries with parameters) and
 * Query (`Q`, the simple protocol). Assumes no TLS (the test database takes none).
 */
class FrontendReader {
  private buffer = Buffer.alloc(0);
  private startup = true;

  constructor(private readonly onQuery: (text: string) => void) {}

  push(chunk: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      if (this.startup) {
        if (this.buffer.length < 8) {
          return;
        }
        const length = this.buffer.readInt32BE(0);
        if (this.buffer.length < length) {
          return;
        }
        const code = this.buffer.readInt32BE(4);
        this.startup = code === SSL_REQUEST || code === GSSENC_REQUEST;
        this.buffer = this.buffer.subarray(length);
        continue;
      }
      if (this.buffer.length < 5) {
        return;
      }
      const total = 1 + this.buffer.readInt32BE(1);
      if (this.buffer.length < total) {
        return;
      }
      const type = String.fromCharCode(this.buffer[0]);
      const payload = this.buffer.subarray(5, total);
      if (type === 'Q') {
        this.onQuery(payload.subarray(0, payload.indexOf(0)).toString('utf8'));
      } else if (type === 'P') {
        const afterName = payload.indexOf(0) + 1;
        this.onQuery(payload.subarray(afterName, payload.indexOf(0, afterName)).toString('utf8'));
      }
      this.buffer = this.buffer.subarray(total);
    }
  }
}

/**
 * A TCP proxy in front of the test database that logs every statement its clients send: a process
 * given `url` as its DATABASE_URL has each of its Postgres queries counted as it is sent, which is
 * exact where Postgres's own statistics are flushed late.
 */
export class PgQueryLog {
  private constructor(
    private readonly proxy: TcpProxy,
    /** Every statement sent so far, in order. */
    readonly queries: string[],
  ) {}

  static async start(): Promise<PgQueryLog> {
    const target = databaseTarget();
    const queries: string[] = [];
    const proxy = await TcpProxy.start(target.host, target.port, () => {
      const reader = new FrontendReader((text) => queries.push(text));
      return (chunk) => reader.push(chunk);
    });
    return new PgQueryLog(proxy, queries);
  }

  /** The DATABASE_URL that goes through this log. */
  get url(): string {
    return databaseUrlVia(this.proxy.port);
  }

  /** How many statements so far match. */
  count(pattern: RegExp): number {
    return this.queries.filter((q) => pattern.test(q)).length;
  }

  /** Ends every connection; a client that reconnects meanwhile is turned away. */
  async stop(): Promise<void> {
    await this.proxy.stop();
  }
}
