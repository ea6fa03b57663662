import { z } from 'zod';
// By path, not '@app/common': the dashboard's compiler reads these schemas without the alias.
import { TASK_KINDS } from '../../../../libs/common/src/tasks/task-kinds';
import { TASK_STATUSES } from '../../../../libs/common/src/tasks/task-statuses';
import { named } from '../openapi/components';

const iso = z.iso.datetime({ offset: true });
const nullableIso = iso.nullable();
const uuid = z.uuid();

/** A task's statuses, as its record and the usage reports name them. */
export const taskStatus = z.enum(TASK_STATUSES);

/** What a task asked for, as its record and the usage reports name it. */
export const taskKind = z
  .enum(TASK_KINDS)
  .describe('What it asked for: `chat` (chat routes) or `embedding` (embeddings routes, one task per batch of inputs)');

/** The fields of a task record that the tenant's view and the admin's share. */
export const taskFields = {
  object: z.literal('task'),
  task_address: z.string(),
  status: taskStatus,
  model: z.string(),
  mode: z.enum(['direct', 'network']),
  api: z.enum(['openai', 'ollama']),
  kind: taskKind,
  stream: z.boolean(),
  device_id: uuid
    .nullable()
    .describe('The device that has or had the task: for an organization, only one of its own (direct); else null'),
  device_ref: z
    .string()
    .nullable()
    .describe(
      'An opaque reference to that device: the same for every task of this organization it serves, another for another organization',
    ),
  attempts: z.number().int(),
  resumes: z
    .number()
    .int()
    .describe(
      'How many times the answer was resumed on another device after its device was lost mid-answer (0: served by one device)',
    ),
  finish_reason: z.string().nullable(),
  error_code: z.string().nullable(),
  usage: z
    .strictObject({
      prompt_tokens: z.number().int(),
      completion_tokens: z.number().int(),
      total_tokens: z.number().int(),
      source: z.enum(['device', 'relay']).optional(),
    })
    .nullable(),
  output_sha256: z.string().nullable(),
  model_digest: z
    .string()
    .nullable()
    .describe('The model digest its device announced for the model (the runtime’s word); null when it announced none'),
  trace_id: z
    .string()
    .nullable()
    .describe('The OpenTelemetry trace id of the request that made it, when the api exported traces; else null'),
  queued_at: iso,
  assigned_at: nullableIso,
  first_token_at: nullableIso,
  finished_at: nullableIso,
};

/** `GET /v1/tasks/{address}`. */
export const task = named(
  'Task',
  'A task record: who asked, who served, how it ended; while it waits, where it stands in its queue.',
  z.strictObject({
    ...taskFields,
    queue_position: z.number().int().min(1).optional().describe('While queued: 1 = the next request its queue serves.'),
    eta_ms: z
      .number()
      .int()
      .nullable()
      .optional()
      .describe(
        "While queued: estimated wait before a device takes it (position, devices online, the queue's recent service time); null without a basis.",
      ),
  }),
);
