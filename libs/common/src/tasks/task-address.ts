import type { Task } from '../prisma/generated/client';
import { deviceRef } from './device-ref';

export type TaskModeName = 'direct' | 'network';

const ADDRESS = /^(direct|network):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** `<mode>:<uuid>`, the public name of a task. */
export function taskAddress(mode: TaskModeName, id: string): string {
  return `${mode}:${id}`;
}

/** Splits a task address, or returns null when it is not one (the caller answers 404). */
export function parseTaskAddress(value: string): { mode: TaskModeName; id: string } | null {
  const match = ADDRESS.exec(value);
  return match ? { mode: match[1] as TaskModeName, id: match[2] } : null;
}

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

/** What a task view needs: a Postgres row, or the task's state in Redis while it is in flight. */
export type TaskFields = Pick<
  Task,
  | 'address'
  | 'orgId'
  | 'status'
  | 'modelId'
  | 'mode'
  | 'api'
  | 'kind'
  | 'stream'
  | 'deviceId'
  | 'attempts'
  | 'finishReason'
  | 'errorCode'
  | 'promptTokens'
  | 'completionTokens'
  | 'outputSha256'
  | 'modelDigest'
  | 'queuedAt'
  | 'assignedAt'
  | 'firstTokenAt'
  | 'finishedAt'
> & {
  /** Null in a state read from Redis for a task never resumed. */
  resumes: number | null;
  /** Absent in a state written before traces. */
  traceId?: string | null;
};

/**
 * The public JSON of a task record, as `GET /v1/tasks/{task_address}` returns it to its organization
 * (`organization`) and `GET /admin/tasks/{task_address}` to an operator (`operator`). An organization
 * sees the id of a device of its own (a direct task); of a network device, only the opaque
 * `device_ref`, so that organizations cannot match the devices they share.
 */
export function taskView(task: TaskFields, audience: 'organization' | 'operator') {
  const hasUsage = task.promptTokens !== null || task.completionTokens !== null;
  return {
    object: 'task' as const,
    task_address: task.address,
    status: task.status,
    model: task.modelId,
    mode: task.mode,
    api: task.api,
    kind: task.kind,
    stream: task.stream,
    device_id: audience === 'operator' || task.mode === 'direct' ? task.deviceId : null,
    device_ref: task.deviceId ? deviceRef(task.orgId, task.deviceId) : null,
    attempts: task.attempts,
    resumes: task.resumes ?? 0,
    finish_reason: task.finishReason,
    error_code: task.errorCode,
    usage: hasUsage
      ? {
          prompt_tokens: task.promptTokens ?? 0,
          completion_tokens: task.completionTokens ?? 0,
          total_tokens: (task.promptTokens ?? 0) + (task.completionTokens ?? 0),
        }
      : null,
    output_sha256: task.outputSha256,
    model_digest: task.modelDigest,
    trace_id: task.traceId ?? null,
    queued_at: iso(task.queuedAt),
    assigned_at: iso(task.assignedAt),
    first_token_at: iso(task.firstTokenAt),
    finished_at: iso(task.finishedAt),
  };
}

export type TaskView = ReturnType<typeof taskView>;
