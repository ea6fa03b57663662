import { localActor } from './audit';
import type { AuditActor } from './audit';
import { AdminAuditService } from './audit.service';
import { AdminCanariesService } from './canaries.service';
import type { CanaryInput } from './canaries.service';
import { AdminDevicesService } from './devices.service';
import { AdminKeysService } from './keys.service';
import type { CreateKeyInput, RotateKeyInput } from './keys.service';
import { AdminModelsService } from './models.service';
import type { AddModelInput } from './models.service';
import { AdminOrgsService } from './orgs.service';
import type { LimitsInput } from './orgs.service';
import { AdminTasksService } from './tasks.service';
import { sqlOf } from './sql';
import type { Sql } from './sql';

export { orgNameSchema, modelIdSchema, parseDuration } from './admin-input';
export { sqlOf } from './sql';
export type { Sql } from './sql';
export type { CreateKeyInput, RotateKeyInput, AddModelInput, LimitsInput };
export { AdminFleetService } from './fleet.service';
export { AdminTrafficService } from './traffic.service';
export type { FleetDevice, FleetQueue, FleetLine } from './fleet.service';
export type { DeviceRecord } from './devices.service';
export type { CanaryExpect, CanaryInput, CanaryMessage, CanaryRecord, CanaryRow } from './canaries.service';
export {
  AdminCanariesService,
  AdminDevicesService,
  AdminKeysService,
  AdminModelsService,
  AdminOrgsService,
  AdminTasksService,
};

/**
 * The operators' operations on one client, one service per resource. Inputs are checked in the
 * services, so the admin CLI and the admin HTTP API (which call the services) refuse the same things
 * with the same messages, and a refused call changes nothing.
 *
 * The flat methods are for fixtures (tests, bench, demo) that set up a few records in a line each;
 * the front ends use the resource services.
 */
export class AdminService {
  readonly orgs: AdminOrgsService;
  readonly keys: AdminKeysService;
  readonly models: AdminModelsService;
  readonly devices: AdminDevicesService;
  readonly tasks: AdminTasksService;
  readonly canaries: AdminCanariesService;
  readonly audit: AdminAuditService;

  /**
   * On a pg pool (the api, the CLI) or a Prisma client (test and bench fixtures). Its changes are
   * recorded in the audit log as `actor`'s: by default this process's user and host, through `cli`.
   */
  constructor(db: Parameters<typeof sqlOf>[0], actor: AuditActor = localActor()) {
    const sql: Sql = sqlOf(db);
    this.orgs = new AdminOrgsService(sql, actor);
    this.keys = new AdminKeysService(sql, actor);
    this.models = new AdminModelsService(sql, actor);
    this.devices = new AdminDevicesService(sql, actor);
    this.tasks = new AdminTasksService(sql);
    this.canaries = new AdminCanariesService(sql, actor);
    this.audit = new AdminAuditService(sql);
  }

  createOrg = (name: string) => this.orgs.create(name);
  setLimits = (org: string, input: LimitsInput) => this.orgs.setLimits(org, input);
  listOrgs = () => this.orgs.list();
  createKey = (input: CreateKeyInput) => this.keys.create(input);
  listKeys = (org: string) => this.keys.list(org);
  revokeKey = (id: string) => this.keys.revoke(id);
  setKeyBudget = (id: string, budget: number | null) => this.keys.setBudget(id, budget);
  rotateKey = (id: string, input?: RotateKeyInput) => this.keys.rotate(id, input);
  addModel = (input: AddModelInput) => this.models.add(input);
  listModels = () => this.models.list();
  enableModel = (model: string, org: string) => this.models.enable(model, org);
  disableModel = (model: string, org: string) => this.models.disable(model, org);
  createDevice = (name: string, org?: string) => this.devices.create(name, org);
  listDevices = () => this.devices.list();
  revokeDevice = (id: string) => this.devices.revoke(id);
  showTask = (address: string) => this.tasks.show(address);
  addCanary = (model: string, input: CanaryInput) => this.canaries.add(model, input);
}
