/**
 * The admin API's response bodies, as the page reads them: inferred from the zod schemas the api
 * documents them with (its e2e suite checks real responses against the same schemas). Type-only
 * imports: esbuild drops them, so neither zod nor the api's code is bundled into the page.
 */
import type { z } from 'zod';
import type { dashboardSession } from '../../../apps/api/src/dashboard/dashboard.schemas';
import type { auditPage } from '../../../apps/api/src/admin/audit/audit.schemas';
import type { deviceList } from '../../../apps/api/src/admin/devices/devices.schemas';
import type { adminTask, queueList, traffic } from '../../../apps/api/src/admin/fleet/fleet.schemas';
import type { keyList } from '../../../apps/api/src/admin/keys/keys.schemas';
import type { catalogModelList } from '../../../apps/api/src/admin/models/models.schemas';
import type { orgList } from '../../../apps/api/src/admin/orgs/orgs.schemas';
import type { usageReport } from '../../../apps/api/src/usage/usage.schemas';

/** `GET /admin/devices`. */
export type DeviceList = z.infer<typeof deviceList>;
/** `GET /admin/queues`. */
export type QueueList = z.infer<typeof queueList>;
/** `GET /admin/traffic`: the last hour by minute, errors by code, the latest failures. */
export type Traffic = z.infer<typeof traffic>;
/** One minute of traffic. */
export type TrafficMinute = Traffic['minutes'][number];
/** `GET /admin/usage`. */
export type UsageReport = z.infer<typeof usageReport>;
/** `GET /admin/tasks/{task_address}`. */
export type AdminTask = z.infer<typeof adminTask>;
/** `GET /admin/orgs`. */
export type OrgList = z.infer<typeof orgList>;
/** `GET /admin/orgs/{org}/keys`. */
export type KeyList = z.infer<typeof keyList>;
/** `GET /admin/models`: the catalog, with the organizations each model is enabled for. */
export type ModelList = z.infer<typeof catalogModelList>;
/** `GET /admin/audit`: a page of the audit log, newest first. */
export type AuditPage = z.infer<typeof auditPage>;
/** One admin change. */
export type AuditEntry = AuditPage['data'][number];
/** `GET /dashboard/session`. */
export type DashboardSession = z.infer<typeof dashboardSession>;
