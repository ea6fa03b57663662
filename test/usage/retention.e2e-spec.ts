import { AdminService } from '@app/common';
import { ADMIN_TOKEN, closeDb, db, http, sleep, startApi, uniq } from '../support/stack';
import type { Api } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import { pastRecords } from '../support/past-records';

const DAY = 86_400_000;
/** This suite's own months, long before anything other suites write. */
const OLD = Date.UTC(1997, 2, 1);
const KEPT = Date.UTC(1997, 5, 1);

/**
 * Retention as an operator runs it (issue 39): an api started with TASK_RETENTION_DAYS deletes, by
 * itself, the ended task records queued before the cutoff; the usage reports of those months answer
 * as before; records after the cutoff and tasks still in flight stay; a deleted task's record is 404.
 */
describe('task retention, by the api', () => {
  let api: Api | undefined;
  let org: { id: string; name: string };
  const model = uniq('retention-e2e');
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

  const tasks = (n: number, from: number, status: 'completed' | 'failed' | 'streaming') =>
    pastRecords({ orgId: org.id, modelId: model }, n, from, status, 25);
  const report = (from: string, to: string, groupBy: string) =>
    http('GET', `${api!.url}/admin/usage?org=${org.name}&from=${from}&to=${to}&group_by=${groupBy}`, {
      headers: admin,
    });
  const rows = (from: number, to: number) =>
    db().task.count({ where: { orgId: org.id, queuedAt: { gte: new Date(from), lt: new Date(to) } } });

  beforeAll(async () => {
    const service = new AdminService(db());
    await service.models.add({ id: model });
    org = await service.orgs.create(uniq('retention-e2e'));
    await db().task.createMany({ data: tasks(300, OLD, 'completed') });
    await db().task.createMany({ data: tasks(40, OLD, 'failed') });
    await db().task.createMany({ data: tasks(2, OLD, 'streaming') });
    await db().task.createMany({ data: tasks(50, KEPT, 'completed') });
  });

  afterAll(async () => {
    await api?.stop();
    await closeDb();
  });

  it('deletes the ended records past the cutoff by itself, and the reports of their months answer as before', async () => {
    // An api without retention first, to read the reports while every record is there.
    api = await startApi({ TASK_RETENTION_DAYS: '0' });
    const ranges: [string, string, string][] = [
      ['1997-03-01', '1997-04-01', 'status'],
      ['1997-01-01', '1998-01-01', 'model,day'],
    ];
    const before: any[] = [];
    for (const [from, to, groupBy] of ranges) {
      const res = await report(from, to, groupBy);
      expectStatus(res, 200);
      before.push(res.body.data);
    }
    expect(before[0].find((r: any) => r.status === 'completed').requests).toBe(300);
    const gone = (
      await db().task.findFirstOrThrow({
        where: { orgId: org.id, status: 'completed', queuedAt: { lt: new Date(KEPT) } },
      })
    ).address;
    await api.stop();

    // The cutoff falls on 1997-05-01: March goes, June stays.
    const days = Math.round((Date.now() - Date.UTC(1997, 4, 1)) / DAY);
    api = await startApi({ TASK_RETENTION_DAYS: String(days) });
    for (let i = 0; (await rows(OLD, Date.UTC(1997, 3, 1))) > 2; i++) {
      expect(i).toBeLessThan(300);
      await sleep(100);
    }
    expect(await rows(OLD, Date.UTC(1997, 3, 1))).toBe(2);
    expect(await rows(KEPT, Date.UTC(1997, 6, 1))).toBe(50);
    for (const [i, [from, to, groupBy]] of ranges.entries()) {
      const res = await report(from, to, groupBy);
      expectStatus(res, 200);
      expect({ from, to, groupBy, data: res.body.data }).toEqual({ from, to, groupBy, data: before[i] });
    }
    const deleted = await http('GET', `${api.url}/admin/tasks/${gone}`, { headers: admin });
    expect([deleted.status, deleted.body.error?.code]).toEqual([404, 'task_not_found']);
  });
});
