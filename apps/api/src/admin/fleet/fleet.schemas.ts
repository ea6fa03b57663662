import { z } from 'zod';
// By path, not '@app/common': the dashboard's compiler reads these schemas without the alias.
import { ERROR_STATUSES } from '../../../../../libs/common/src/tasks/task-statuses';
import { listOf, named } from '../../openapi/components';
import { taskFields } from '../../tasks/tasks.schemas';

/* The answers of the fleet routes: the queues, the last hour of traffic, any task record. */

const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
const pool = z.enum(['direct', 'network']);
const waitMs = z.number().int().nullable().describe('Age of the oldest waiting job in ms; null when none waits');

export const queueList = named(
  'QueueList',
  'Every (model, pool) queue with devices online or jobs waiting, by queue name.',
  listOf(
    z.strictObject({
      queue: z.string().describe('The queue’s name in Redis'),
      model: z.string(),
      pool,
      org: z.string().nullable().describe('The organization of a direct pool; null for the network'),
      waiting: z.number().int(),
      oldest_wait_ms: waitMs,
      devices_online: z.number().int().describe('Devices online serving this queue'),
      devices_busy: z.number().int().describe('Of those, the ones serving a task now'),
      lines: z
        .array(
          z.strictObject({
            org: z.string().nullable(),
            org_id: uuid,
            waiting: z.number().int(),
            oldest_wait_ms: waitMs,
          }),
        )
        .describe('Each organization with jobs waiting, in its own line; organizations are served in turn by weight'),
    }),
  ),
);

const msOrNull = z.number().int().nullable();
export const traffic = named(
  'Traffic',
  'The last hour of traffic by minute (minutes without requests are left out), errors by code, the latest failures.',
  z.strictObject({
    window_minutes: z.number().int(),
    minutes: z.array(
      z.strictObject({
        at: iso.describe('The minute (UTC) the requests were queued in'),
        requests: z.number().int(),
        requests_per_second: z.number(),
        errors: z.number().int().describe('Requests that ended failed or timed_out'),
        ttft_p50_ms: msOrNull,
        ttft_p95_ms: msOrNull,
        duration_p50_ms: msOrNull,
        duration_p95_ms: msOrNull,
      }),
    ),
    errors_by_code: z.array(z.strictObject({ code: z.string(), count: z.number().int() })),
    recent_failures: z.array(
      z.strictObject({
        task_address: z.string(),
        org: z.string(),
        model: z.string(),
        status: z.enum(ERROR_STATUSES),
        error_code: z.string().nullable(),
        queued_at: iso,
        finished_at: iso.nullable(),
      }),
    ),
  }),
);

export const adminTask = named(
  'AdminTask',
  'A task record of any organization.',
  z.strictObject({
    ...taskFields,
    org: z.string(),
    api_key_id: uuid.nullable(),
    segments: z
      .array(
        z.strictObject({
          attempt: z.number().int(),
          device_id: z.string(),
          assigned_at: iso.nullable(),
          first_output_at: iso.nullable(),
          last_output_at: iso.nullable(),
          tokens: z.number().int().describe('Output pieces relayed (tokens, as Switchyard counts them)'),
          bytes: z.number().int(),
          sha256: z.string().describe('SHA-256 of the text this device produced'),
          ended: z
            .string()
            .describe(
              'Why its part ended: `completed`, a resume cause (`device_disconnected`, `device_timeout`, `dispatcher_lost`, a device error), or how the task ended',
            ),
        }),
      )
      .nullable()
      .describe(
        'A resumed task: which device produced which part of the answer, in order; null when one device served it',
      ),
  }),
);
