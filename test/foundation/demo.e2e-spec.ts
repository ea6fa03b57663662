import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { freePort, startNode } from '../support/stack';
import type { Proc } from '../support/stack';

/** Whether something accepts TCP connections on 127.0.0.1:port. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** The command lines of the machine's processes that mention `needle`. */
async function processesWith(needle: string): Promise<string[]> {
  const found: string[] = [];
  for (const pid of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(needle)) {
      found.push(`${pid}: ${cmdline.replaceAll('\0', ' ')}`);
    }
  }
  return found;
}

/**
 * `npm run demo` on a machine with nothing but Node: DATABASE_URL and REDIS_URL point at ports where
 * nothing listens and SWITCHYARD_EMBEDDED=1 is set, so the demo starts an embedded Postgres and Redis
 * of its own, answers the openai client, and leaves no server behind once stopped.
 */
describe('the demo with embedded Postgres and Redis', () => {
  let demo: Proc | null = null;
  let scratch = '';

  afterAll(async () => {
    await demo?.stop('SIGKILL');
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('starts them, answers a chat completion, and stops them on SIGTERM', async () => {
    scratch = await mkdtemp(join(tmpdir(), 'switchyard-demo-'));
    // Run as root (CI), the embedded Postgres runs as the postgres user, who must reach its data.
    await chmod(scratch, 0o755);
    const [closedPg, closedRedis, apiPort, dispatcherPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    demo = startNode('apps/cli/src/demo.js', [], {
      PATH: process.env.PATH,
      DATABASE_URL: `postgresql://postgres@127.0.0.1:${closedPg}/switchyard`,
      REDIS_URL: `redis://127.0.0.1:${closedRedis}`,
      SWITCHYARD_EMBEDDED: '1',
      SWITCHYARD_EMBEDDED_DIR: join(scratch, 'embedded'),
      SWITCHYARD_DEMO_STATE: join(scratch, 'demo.json'),
      API_PORT: String(apiPort),
      DISPATCHER_PORT: String(dispatcherPort),
      HOST: '127.0.0.1',
    });
    // initdb on the first start, migrations, four processes: generous on a loaded machine.
    await demo.waitFor(/demo ready/, 120_000);
    const pgPort = Number(/Postgres: .* on 127\.0\.0\.1:(\d+)/.exec(demo.stdout)?.[1]);
    const redisPort = Number(/Redis: .* on 127\.0\.0\.1:(\d+)/.exec(demo.stdout)?.[1]);
    expect({ ok: pgPort > 0 && redisPort > 0, stdout: demo.stdout }).toEqual(expect.objectContaining({ ok: true }));
    expect(demo.stdout).toContain(`data in ${join(scratch, 'embedded', 'postgres')}`);
    expect(await listening(pgPort)).toBe(true);
    expect(await listening(redisPort)).toBe(true);

    const key = /API key \(org "demo"\):\s+(sy_\w+)/.exec(demo.stdout)?.[1];
    expect({ ok: Boolean(key), stdout: demo.stdout }).toEqual(expect.objectContaining({ ok: true }));
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${apiPort}/v1`, apiKey: key, maxRetries: 0 });
    const answer = await client.chat.completions.create({
      model: 'switchyard/sim-1',
      messages: [{ role: 'user', content: 'Say hello to Switchyard' }],
      max_tokens: 8,
    });
    expect(answer.choices[0].message.content?.length).toBeGreaterThan(0);
    expect(answer.usage?.completion_tokens).toBe(8);
    // The demo's embedding model answers too, on the same device.
    const embedded = await client.embeddings.create({ model: 'switchyard/sim-embed-1', input: ['Say hello'] });
    expect(embedded.data[0].embedding).toHaveLength(768);

    expect({ actual: await demo.stop('SIGTERM', 30_000), output: demo.output }).toEqual(
      expect.objectContaining({ actual: 0 }),
    );
    expect(demo.stdout).toContain('stopped.');
    // Nothing of it is left: no server on its ports, no process on its data.
    expect(await listening(pgPort)).toBe(false);
    expect(await listening(redisPort)).toBe(false);
    expect(await processesWith(join(scratch, 'embedded'))).toEqual([]);
    expect(await processesWith(`127.0.0.1:${redisPort}`)).toEqual([]);
  }, 180_000);
});
