import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  AdminService,
  AppError,
  createPrismaClient,
  NETWORK_POOL,
  connectRedis,
  redisTargetOf,
  DISPATCHER_SCRIPT,
  ServiceProcess,
  givenInEnvironment,
  loadConfigOrExit,
  projectRoot,
  sha256Hex,
  spawnNode,
  waitForHttp,
  KeySpace,
} from '@app/common';
import type { AppConfig, PrismaClient } from '@app/common';
import { startEmbeddedRedisCluster } from './embedded/embedded-redis-cluster';
import { chooseService, startEmbeddedPostgres, startEmbeddedRedis } from './embedded/services';
import type { ServiceChoice } from './embedded/services';
import { migrate } from './migrations/migrator';

/**
 * `npm run demo`: Switchyard end to end on this machine. Checks Postgres and Redis (starting embedded
 * ones for a URL that does not answer and was not given, or for both with --embedded), migrates,
 * creates (once) a demo organization, key, model and network device, starts the api, the dispatcher
 * and one simulated device, and prints a working curl command. Ctrl-C stops everything.
 */
const ROOT = projectRoot();
/** The build this demo runs from (dist/, or a test run's): its children are run from the same one. */
const DIST = join(__dirname, '..', '..', '..');
const ORG = 'demo';
const MODEL = 'switchyard/sim-1';
/** The demo's embedding model, served by the same simulated device (deterministic unit vectors). */
const EMBED_MODEL = 'switchyard/sim-embed-1';
const DEVICE = 'demo-sim-device';
/** The demo's secrets, kept between runs because keys are shown only once. Not committed. */
const STATE_FILE = process.env.SWITCHYARD_DEMO_STATE ?? join(ROOT, '.switchyard-demo.json');

interface DemoState {
  key: string;
  deviceToken: string;
  adminToken: string;
}

const say = (line: string) => process.stdout.write(`${line}\n`);

function readState(): Partial<DemoState> {
  try {
    return existsSync(STATE_FILE) ? (JSON.parse(readFileSync(STATE_FILE, 'utf8')) as Partial<DemoState>) : {};
  } catch {
    return {};
  }
}

/** Creates what is missing, reusing the saved key and token while the database still knows them. */
async function provision(db: PrismaClient): Promise<DemoState> {
  const admin = new AdminService(db);
  const saved = readState();
  const ignoreConflict = async (fn: () => Promise<unknown>) => {
    try {
      await fn();
    } catch (error) {
      if (!(error instanceof AppError && error.code === 'conflict')) {
        throw error;
      }
    }
  };
  await ignoreConflict(() => admin.createOrg(ORG));
  await ignoreConflict(() =>
    admin.addModel({ id: MODEL, maxOutputTokens: 4096, ownedBy: 'switchyard-demo', network: true }),
  );
  await ignoreConflict(() =>
    admin.addModel({ id: EMBED_MODEL, kind: 'embedding', ownedBy: 'switchyard-demo', network: true }),
  );
  await admin.enableModel(MODEL, ORG);
  await admin.enableModel(EMBED_MODEL, ORG);

  const keyRow = saved.key ? await db.apiKey.findUnique({ where: { hash: sha256Hex(saved.key) } }) : null;
  const key = keyRow && !keyRow.revokedAt ? saved.key! : (await admin.createKey({ org: ORG, label: 'demo' })).key;
  const deviceRow = saved.deviceToken
    ? await db.device.findUnique({ where: { tokenHash: sha256Hex(saved.deviceToken) } })
    : null;
  const deviceToken = deviceRow && !deviceRow.revokedAt ? saved.deviceToken! : (await admin.createDevice(DEVICE)).token;
  const state: DemoState = {
    key,
    deviceToken,
    adminToken: saved.adminToken ?? `adm_${randomBytes(24).toString('hex')}`,
  };
  writeFileSync(STATE_FILE, JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
  return state;
}

/** How long the api and the dispatcher may take to answer /healthz. */
const START_TIMEOUT_MS = 20_000;
/** How long a child may take to stop on SIGTERM before it is killed. */
const STOP_GRACE_MS = 8_000;

/**
 * Starts one of the build's entry points. Its output goes to the terminal, each line prefixed with its
 * name, and is not kept besides (the demo may run for days).
 */
function start(name: string, script: string, args: string[], env: NodeJS.ProcessEnv): ServiceProcess {
  return new ServiceProcess(spawnNode(script, args, { build: DIST, env }), { name, echo: true, keepChars: 0 });
}

async function waitForDevice(config: AppConfig): Promise<void> {
  const redis = connectRedis(redisTargetOf(config), 'commands');
  try {
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if ((await redis.zcount(KeySpace.of(redis).presence(NETWORK_POOL, MODEL), Date.now(), '+inf')) > 0) {
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the demo device did not come online');
  } finally {
    redis.disconnect();
  }
}

/**
 * Postgres and Redis for the demo: the servers at DATABASE_URL and REDIS_URL when they answer; an
 * embedded one for a URL that does not answer and was not given, or for both with --embedded (or
 * SWITCHYARD_EMBEDDED=1). A given URL that does not answer is an error: the user asked for it.
 */
async function stores(config: AppConfig): Promise<{ pg: ServiceChoice; redis: ServiceChoice }> {
  const force = process.argv.includes('--embedded') || config.SWITCHYARD_EMBEDDED;
  // A Redis Cluster, given (REDIS_CLUSTER_NODES) or embedded (--cluster), stands in for REDIS_URL.
  const cluster = config.REDIS_CLUSTER_NODES !== undefined || process.argv.includes('--cluster');
  const [pg, redis] = await Promise.allSettled([
    chooseService('Postgres', config.DATABASE_URL, {
      explicit: givenInEnvironment('DATABASE_URL'),
      force,
      // Kept between runs (the demo's key stays valid), ignored by git.
      start: () =>
        startEmbeddedPostgres({
          dataDir: join(config.SWITCHYARD_EMBEDDED_DIR ?? join(ROOT, '.switchyard', 'embedded'), 'postgres'),
        }),
    }),
    cluster
      ? Promise.resolve({ url: config.REDIS_URL, embedded: null, unreachable: null })
      : chooseService('Redis', config.REDIS_URL, {
          explicit: givenInEnvironment('REDIS_URL'),
          force,
          start: startEmbeddedRedis,
        }),
  ]);
  if (pg.status === 'rejected' || redis.status === 'rejected') {
    // The one that did start goes with the demo.
    await Promise.all(
      [pg, redis].map((r) =>
        r.status === 'fulfilled' && r.value.embedded ? r.value.embedded.stop() : Promise.resolve(),
      ),
    );
    const problem = [pg, redis]
      .map((r) => (r.status === 'rejected' ? (r.reason as Error).message : ''))
      .filter(Boolean);
    throw new Error(
      `${problem.join('; ')}: start it (docker compose up -d postgres redis, or your local packages), unset the variable to have the demo start one of its own, or run npm run demo -- --embedded`,
    );
  }
  for (const [what, choice] of [
    ['Postgres', pg.value],
    ['Redis', redis.value],
  ] as const) {
    if (choice.embedded) {
      const why = choice.unreachable ? `nothing answered at the default URL (${choice.unreachable})` : 'as asked';
      say(`${what}: ${why}; started an embedded one for this demo: ${choice.embedded.description}`);
    }
  }
  return { pg: pg.value, redis: redis.value };
}

async function main(): Promise<void> {
  const given = loadConfigOrExit();
  const { pg, redis } = await stores(given).catch((error: unknown) => {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(1);
  });
  const embedded: { stop(): Promise<void> }[] = [pg.embedded, redis.embedded].filter((e) => e !== null);
  const stopEmbedded = () => Promise.all(embedded.map((e) => e.stop().catch(() => undefined)));
  let clusterNodes = given.REDIS_CLUSTER_NODES;
  if (process.argv.includes('--cluster') && !clusterNodes) {
    const cluster = await startEmbeddedRedisCluster({ masters: 3, replicasPerMaster: 0 }).catch(
      async (error: unknown) => {
        await stopEmbedded();
        process.stderr.write(`the demo's Redis Cluster could not start: ${(error as Error).message}\n`);
        process.exit(1);
      },
    );
    embedded.push(cluster);
    clusterNodes = cluster.nodes;
    say(`Redis: started an embedded Redis Cluster for this demo: ${cluster.description}`);
  }
  // The demo's database on an embedded server; the given URLs otherwise.
  const config: AppConfig = {
    ...given,
    DATABASE_URL: pg.embedded ? `${pg.embedded.url}/switchyard` : given.DATABASE_URL,
    REDIS_URL: redis.url,
    REDIS_CLUSTER_NODES: clusterNodes,
  };
  try {
    await run(config, stopEmbedded);
  } catch (error) {
    await stopEmbedded();
    throw error;
  }
}

async function run(config: AppConfig, stopEmbedded: () => Promise<unknown>): Promise<void> {
  const result = await migrate(config.DATABASE_URL, join(ROOT, 'prisma/migrations'));
  say(`database ready (${result.applied.length} migration(s) applied now)`);
  const db = createPrismaClient(config.DATABASE_URL);
  const state = await provision(db).finally(() => db.$disconnect());

  const env = {
    ...process.env,
    DATABASE_URL: config.DATABASE_URL,
    REDIS_URL: config.REDIS_URL,
    ...(config.REDIS_CLUSTER_NODES
      ? {
          REDIS_CLUSTER_NODES: config.REDIS_CLUSTER_NODES.map(
            ({ host, port }) => `${host.includes(':') ? `[${host}]` : host}:${port}`,
          ).join(','),
        }
      : {}),
    API_PORT: String(config.API_PORT),
    DISPATCHER_PORT: String(config.DISPATCHER_PORT),
    ADMIN_TOKEN: state.adminToken,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
  };
  const children: ServiceProcess[] = [];
  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) {
      return;
    }
    stopping = true;
    say('\nstopping…');
    await Promise.all(children.map((child) => child.terminate('SIGTERM', STOP_GRACE_MS)));
    // The servers the children used go after them.
    await stopEmbedded();
    say('stopped.');
    process.exit(code);
  };
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));

  const local = '127.0.0.1';
  const apiUrl = `http://${local}:${config.API_PORT}`;
  const dispatcherUrl = `http://${local}:${config.DISPATCHER_PORT}`;
  try {
    const api = start('api', 'apps/api/src/main.js', [], env);
    const dispatcher = start('dispatcher', DISPATCHER_SCRIPT, [], env);
    children.push(api, dispatcher);
    await Promise.all([
      waitForHttp(`${apiUrl}/healthz`, { timeoutMs: START_TIMEOUT_MS, process: api }),
      waitForHttp(`${dispatcherUrl}/healthz`, { timeoutMs: START_TIMEOUT_MS, process: dispatcher }),
    ]);
    const device = start(
      'device',
      'apps/device/src/main.js',
      [
        '--server',
        dispatcherUrl,
        '--backend',
        'sim',
        '--model',
        MODEL,
        '--model',
        EMBED_MODEL,
        '--sim-ttft-ms',
        '150',
        '--sim-tokens-per-second',
        '25',
        '--log-level',
        env.LOG_LEVEL,
      ],
      { ...env, SWITCHYARD_DEVICE_TOKEN: state.deviceToken },
    );
    children.push(device);
    await waitForDevice(config);
    for (const child of children) {
      void child.exited.then((code) => {
        if (!stopping) {
          process.stderr.write(`a demo process exited unexpectedly (code ${code}); stopping the demo\n`);
          void stop(1);
        }
      });
    }
  } catch (error) {
    process.stderr.write(`demo failed to start: ${(error as Error).message}\n`);
    await stop(1);
    return;
  }

  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello to Switchyard' }] });
  // With ADMIN_PORT set, the dashboard is on the admin listener only.
  const dashboardUrl = config.ADMIN_PORT
    ? `http://${config.ADMIN_HOST}:${config.ADMIN_PORT}/dashboard`
    : `${apiUrl}/dashboard`;
  say(`
Switchyard is running: api ${apiUrl}, dispatcher ${dispatcherUrl}, one simulated device serving ${MODEL} and ${EMBED_MODEL}.

  API key (org "${ORG}"):  ${state.key}
  Admin token:             ${state.adminToken}
  Dashboard:               ${dashboardUrl}  (sign in with the admin token)

Try it:

  curl -s ${apiUrl}/v1/chat/completions \\
    -H "Authorization: Bearer ${state.key}" -H "Content-Type: application/json" \\
    -d '${body}'

Streamed: add "stream": true to the body (and curl -N). Models: curl -s ${apiUrl}/v1/models -H "Authorization: Bearer ${state.key}"
Embeddings: POST ${apiUrl}/v1/embeddings with {"model":"${EMBED_MODEL}","input":["Say hello"]} (768 dimensions).
Any OpenAI client works with base URL ${apiUrl}/v1 and the key above.

Ctrl-C stops everything. (The key and tokens are kept in ${STATE_FILE} for the next run.)\ndemo ready`);
}

main().catch((error: unknown) => {
  process.stderr.write(`demo failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
