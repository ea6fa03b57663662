import { createHash, randomBytes } from 'node:crypto';
import {
  CREATED_OVERLAP_MS,
  FULL_RELOAD_MS,
  KnownCredentials,
  LOAD_PAGE_SIZE,
  MIN_REFRESH_INTERVAL_MS,
  prefixOf,
} from './known-credentials';
import type { CredentialSource } from './known-credentials';

const randomHash = () => createHash('sha256').update(randomBytes(16)).digest('hex');

interface Row {
  hash: string;
  createdAt: number;
  revoked: boolean;
}

/** The api_keys table as the source reads it, with the database's clock, counting the queries. */
class Table implements CredentialSource {
  rows: Row[] = [];
  queries = 0;
  /** When set, queries wait for it (a slow database), or fail with it. */
  gate: Promise<void> | null = null;

  add(hash = randomHash(), createdAt = Date.now()): string {
    this.rows.push({ hash, createdAt, revoked: false });
    return hash;
  }

  /** The answer is what the table holds when the query starts (its snapshot), however long it takes. */
  private async query<T>(answer: () => T): Promise<T> {
    this.queries++;
    const snapshot = answer();
    await this.gate;
    return snapshot;
  }

  clock = () => this.query(() => new Date());
  liveHashes = (after: string, limit: number) =>
    this.query(() =>
      this.rows
        .filter((r) => !r.revoked && r.hash > after)
        .map((r) => r.hash)
        .sort()
        .slice(0, limit),
    );
  createdSince = (since: Date) =>
    this.query(() => ({
      hashes: this.rows.filter((r) => r.createdAt > since.getTime()).map((r) => r.hash),
      at: new Date(),
    }));
}

describe('KnownCredentials', () => {
  beforeEach(() => {
    jest.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  async function loaded(table: Table): Promise<KnownCredentials> {
    const known = new KnownCredentials(table);
    await known.refreshAfterNow();
    return known;
  }

  it('a loaded key may exist; a flood of distinct unknown keys shares one refresh', async () => {
    const table = new Table();
    const key = table.add();
    const known = await loaded(table);
    const afterLoad = table.queries;
    expect(await known.mayExist(key)).toBe(true);
    // a known key needs no query
    expect(table.queries).toBe(afterLoad);
    const answers = Promise.all(Array.from({ length: 1_000 }, () => known.mayExist(randomHash())));
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    expect(new Set(await answers)).toEqual(new Set([false]));
    // one refresh for all of them
    expect(table.queries).toBe(afterLoad + 1);
  });

  it('misses refresh at most once per interval, however many arrive', async () => {
    const table = new Table();
    const known = await loaded(table);
    const start = table.queries;
    const pending: Promise<boolean>[] = [];
    // Ten intervals' worth of misses, one every 10 ms.
    for (let t = 0; t < 10 * MIN_REFRESH_INTERVAL_MS; t += 10) {
      pending.push(known.mayExist(randomHash()));
      await jest.advanceTimersByTimeAsync(10);
    }
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    expect(new Set(await Promise.all(pending))).toEqual(new Set([false]));
    const refreshes = table.queries - start;
    expect({ ok: refreshes >= 9 && refreshes <= 11, message: `${refreshes} refreshes` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
  });

  it('a key created before its first request is found, even when a refresh was already running', async () => {
    const table = new Table();
    const known = await loaded(table);
    // A refresh starts (for another miss) and is slow.
    let release!: () => void;
    table.gate = new Promise((resolve) => (release = resolve));
    const other = known.mayExist(randomHash());
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    // Meanwhile a key is created elsewhere (the CLI, another api) and used here at once.
    const created = table.add();
    const first = known.mayExist(created);
    table.gate = null;
    release();
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    expect(await other).toBe(false);
    // the key was not refused
    expect(await first).toBe(true);
  });

  it('a key whose creation committed after the last refresh, with an earlier created_at, is found within the overlap', async () => {
    const table = new Table();
    const loadedAt = Date.now();
    const known = await loaded(table);
    await jest.advanceTimersByTimeAsync(10_000);
    // Its transaction began 5 s before the load (its created_at), and committed only now.
    const late = table.add(randomHash(), loadedAt - 5_000);
    expect(CREATED_OVERLAP_MS).toBeGreaterThan(5_000);
    expect(await known.mayExist(late)).toBe(true);
  });

  it('a failed refresh fails the miss (the api answers 503), and the next miss tries again', async () => {
    const table = new Table();
    const known = await loaded(table);
    const key = table.add();
    table.gate = Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
    table.gate.catch(() => undefined);
    const failed = known.mayExist(key);
    failed.catch(() => undefined);
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    await expect(failed).rejects.toThrow(/ECONNREFUSED/);
    table.gate = null;
    const retried = known.mayExist(key);
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    expect(await retried).toBe(true);
  });

  it('before the first load succeeds, a miss loads; revoked keys leave the set at the next full reload', async () => {
    const table = new Table();
    const keys = [table.add(), table.add()];
    const known = new KnownCredentials(table);
    // the first miss loads the set
    expect(await known.mayExist(keys[0])).toBe(true);
    table.rows[1].revoked = true;
    // still in the set: its lookup refuses it
    expect(await known.mayExist(keys[1])).toBe(true);
    await jest.advanceTimersByTimeAsync(FULL_RELOAD_MS);
    const reload = known.mayExist(randomHash());
    await jest.advanceTimersByTimeAsync(MIN_REFRESH_INTERVAL_MS);
    expect(await reload).toBe(false);
    expect(known.size).toBe(1);
    expect(await known.mayExist(keys[1])).toBe(false);
  });

  it('loads any number of keys page by page, and holds them as 52-bit prefixes', async () => {
    const table = new Table();
    const hashes = Array.from({ length: 2 * LOAD_PAGE_SIZE + 7 }, () => table.add());
    const known = await loaded(table);
    // the clock, then three pages
    expect(table.queries).toBe(1 + 3);
    expect(known.size).toBe(hashes.length);
    for (const hash of hashes.slice(0, 50).concat(hashes.slice(-50))) {
      expect(await known.mayExist(hash)).toBe(true);
    }
    expect(prefixOf('f'.repeat(64))).toBe(2 ** 52 - 1);
    expect(Number.isSafeInteger(prefixOf('f'.repeat(64)))).toBe(true);
  });
});
