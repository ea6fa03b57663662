import { Pool } from 'pg';
import {
  ADMIN_USAGE_GROUPS,
  AdminService,
  PrismaService,
  RETENTION_BATCH,
  UsageService,
  createLogger,
  foldUsageDeltas,
  parseUsageQuery,
} from '@app/common';
import { RetentionService } from '../../../apps/api/src/usage/retention.service';
import { testConfig } from '../support/apps';
import { DATABASE_URL, closeDb, db, uniq } from '../../support/stack';
import { pastRecords } from '../../support/past-records';

const DAY = 86_400_000;
/** This suite's own months, long before anything other suites write: retention here touches only them. */
const OLD = Date.UTC(1998, 2, 1);
const KEPT = Date.UTC(1998, 5, 1);

/**
 * Task retention on the real Postgres (issue 39): a pass of the api's RetentionService deletes the
 * ended task records queued before TASK_RETENTION_DAYS, in batches, and the usage reports of the months
 * it emptied stay what they were (the rollups keep the counts); records after the cutoff, and records
 * still in flight, stay.
 */
describe('task retention (Postgres)', () => {
  let pool: Pool;
  let prisma: PrismaService;
  let usage: UsageService;
  let org: { id: string; name: string };
  const model = uniq('retention-model');

  const tasks = (n: number, from: number, status: 'completed' | 'failed' | 'streaming') =>
    pastRecords({ orgId: org.id, modelId: model }, n, from, status, 20);

  const report = (from: string, to: string, groupBy: string) =>
    usage.report(parseUsageQuery({ from, to, group_by: groupBy }, ADMIN_USAGE_GROUPS), org.id);
  const count = async (from: number, to: number) =>
    Number(
      (
        await pool.query<{ n: string }>(
          'SELECT count(*) AS n FROM tasks WHERE org_id = $1 AND queued_at >= $2 AND queued_at < $3',
          [org.id, new Date(from), new Date(to)],
        )
      ).rows[0].n,
    );

  beforeAll(async () => {
    pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
    usage = new UsageService(pool);
    const admin = new AdminService(db());
    await admin.models.add({ id: model });
    org = await admin.orgs.create(uniq('retention-org'));
    // More than two batches to delete, and what stays: later records, and one still in flight.
    await db().task.createMany({ data: tasks(2 * RETENTION_BATCH + 500, OLD, 'completed') });
    await db().task.createMany({ data: tasks(300, OLD, 'failed') });
    await db().task.createMany({ data: tasks(3, OLD, 'streaming') });
    await db().task.createMany({ data: tasks(200, KEPT, 'completed') });
    prisma = new PrismaService(testConfig());
  });

  afterAll(async () => {
    await prisma.onApplicationShutdown();
    await pool.end();
    await closeDb();
  });

  it('deletes the ended records past retention, in batches, and the usage reports keep counting them', async () => {
    const before = await Promise.all([
      report('1998-03-01', '1998-04-01', ''),
      report('1998-03-01', '1998-04-01', 'day,status'),
      report('1998-01-01', '1999-01-01', 'model'),
    ]);
    expect(before[0].data[0]).toMatchObject({
      requests: 2 * RETENTION_BATCH + 803,
      completed: 2 * RETENTION_BATCH + 500,
    });

    // Retention counts days back from now: these many put the cutoff on 1998-05-01.
    const days = Math.round((Date.now() - Date.UTC(1998, 4, 1)) / DAY);
    const retention = new RetentionService(
      prisma,
      testConfig({ TASK_RETENTION_DAYS: String(days) }),
      createLogger('test', 'silent'),
    );
    await retention.prune();

    // The ended ones of March went; the three in flight and June's stayed.
    expect(await count(OLD, Date.UTC(1998, 3, 1))).toBe(3);
    expect(await count(KEPT, Date.UTC(1998, 6, 1))).toBe(200);
    // Ended tasks that are gone still count (by the rollups); the three in flight are read from tasks.
    const after = await Promise.all([
      report('1998-03-01', '1998-04-01', ''),
      report('1998-03-01', '1998-04-01', 'day,status'),
      report('1998-01-01', '1999-01-01', 'model'),
    ]);
    expect(after).toEqual(before);
    while ((await foldUsageDeltas(pool)) > 0) {
      // drain
    }
    expect(
      await Promise.all([
        report('1998-03-01', '1998-04-01', ''),
        report('1998-03-01', '1998-04-01', 'day,status'),
        report('1998-01-01', '1999-01-01', 'model'),
      ]),
    ).toEqual(before);
  });

  it('a delete that is not retention still takes its tasks out of the reports', async () => {
    const before = (await report('1998-06-01', '1998-07-01', '')).data[0];
    await pool.query(
      `DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE org_id = $1 AND queued_at >= $2 LIMIT 10)`,
      [org.id, new Date(KEPT)],
    );
    const after = (await report('1998-06-01', '1998-07-01', '')).data[0];
    expect(after.requests).toBe((before.requests as number) - 10);
  });
});
