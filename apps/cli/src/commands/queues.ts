import type { Command } from 'commander';
import type { FleetQueue } from '@app/common/admin/fleet.service';
import type { Run } from '../runner';

/** A queue per row, each organization's line as `org:waiting`; --json has every field. */
function queueTable(result: unknown) {
  return (result as FleetQueue[]).map((q) => ({
    model: q.model,
    pool: q.pool,
    org: q.org,
    waiting: q.waiting,
    oldest_wait_ms: q.oldest_wait_ms,
    devices: q.devices_online,
    busy: q.devices_busy,
    lines: q.lines.map((l) => `${l.org ?? l.org_id}:${l.waiting}`),
  }));
}

/** `queues`: the live view of the queues (the fleet service: Postgres and Redis). */
export function addQueuesCommand(program: Command, run: Run): void {
  program
    .command('queues')
    .description('the queues: jobs waiting, oldest wait, devices online and busy, and each organization’s line')
    .action(() => run(async (s) => (await s.fleet()).queues(), { human: queueTable }));
}
