import type { Command } from 'commander';
import { AppError } from '@app/common/errors/app-error';
import type { FleetDevice } from '@app/common/admin/fleet.service';
import { modelList } from '../arguments';
import { adminCall } from '../runner';
import type { Run } from '../runner';

/** The columns an operator scans in a device list; --json has every field. */
function deviceTable(result: unknown) {
  return (result as FleetDevice[]).map((d) => ({
    id: d.id,
    name: d.name,
    org: d.org,
    pool: d.pool,
    token_prefix: d.token_prefix,
    status: d.status,
    trust: d.trust.state,
    online: d.online,
    available: d.available,
    models: d.models,
    task: d.task,
    last_heartbeat_at: d.last_heartbeat_at,
  }));
}

/**
 * `device create|models|trust|list|show|revoke`: devices that serve models. The list and show commands read
 * the live state too (the fleet service: Postgres and Redis).
 */
export function addDeviceCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const device = program.command('device').description('devices that serve models');
  device
    .command('create <name>')
    .description('register a device; without --org it serves the shared network')
    .option('--org <org-name>', 'organization whose own (direct) device this is')
    .option('--models <a,b>', 'restrict it to these catalog models (default: any it may serve)', modelList)
    .action((name: string, opts: { org?: string; models?: string[] }) =>
      admin((a) => a.devices.create(name, opts.org, opts.models), {
        note: 'Store this token now: it is not shown again.',
      }),
    );
  device
    .command('models <device-id>')
    .description('restrict a device to listed models (--set), or let it serve any it may (--clear)')
    .option('--set <a,b>', 'the only catalog models it may serve', modelList)
    .option('--clear', 'lift the restriction')
    .action((id: string, opts: { set?: string[]; clear?: boolean }) => {
      if ((opts.set === undefined) === (opts.clear === undefined)) {
        throw new AppError('invalid_request', 'give either --set <a,b> or --clear');
      }
      return admin((a) => a.devices.setModels(id, opts.set ?? null));
    });
  device
    .command('trust <device-id>')
    .description(
      'quarantine a network device (it is given no network tasks: its models are taken from it, also while connected), ' +
        'or trust it again',
    )
    .argument('<state>', 'trusted or quarantined')
    .option('--reason <text>', 'why, for the record and the log (up to 200 characters)')
    .action((id: string, state: string, opts: { reason?: string }) =>
      admin(async (a) => (await a.devices.setTrust(id, state, opts.reason)).device),
    );
  device
    .command('list')
    .description('list devices with their live state (online, models served, current task)')
    .action(() => run(async (s) => (await s.fleet()).listDevices(), { human: deviceTable }));
  device
    .command('show <device-id>')
    .description('show one device with its live state')
    .action((id: string) => run(async (s) => (await s.fleet()).showDevice(id)));
  device
    .command('revoke <device-id>')
    .description('revoke a device token (a connected device is disconnected)')
    .action((id: string) => admin((a) => a.devices.revoke(id)));
}
