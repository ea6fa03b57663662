import { AppError } from '../errors/app-error';
import type { Task } from '../prisma/generated/client';
import { parseTaskAddress, taskView } from '../tasks/task-address';
import { withUsageSource } from '../usage/task-usage-source';
import type { Sql } from './sql';

/** A task row in the field names of the Prisma model (what taskView takes). */
const TASK_COLUMNS = `t.id, t.address, t.org_id AS "orgId", t.api_key_id AS "apiKeyId", t.model_id AS "modelId", t.mode,
  t.device_id AS "deviceId", t.status, t.finish_reason AS "finishReason", t.error_code AS "errorCode",
  t.prompt_tokens AS "promptTokens", t.completion_tokens AS "completionTokens", t.output_bytes AS "outputBytes",
  t.usage_source AS "usageSource", t.queued_at AS "queuedAt", t.assigned_at AS "assignedAt",
  t.first_token_at AS "firstTokenAt", t.finished_at AS "finishedAt", t.attempts, t.api, t.kind, t.stream,
  t.output_sha256 AS "outputSha256", t.model_digest AS "modelDigest", t.resumes, t.segments, t.trace_id AS "traceId"`;

/** Operators' view of task records: any organization's. */
export class AdminTasksService {
  constructor(private readonly sql: Sql) {}

  async show(address: string) {
    const [task] = parseTaskAddress(address)
      ? await this.sql.query<Task & { org_name: string }>(
          `SELECT ${TASK_COLUMNS}, o.name AS org_name FROM tasks t JOIN organizations o ON o.id = t.org_id
           WHERE t.address = $1`,
          [address],
        )
      : [];
    if (!task) {
      throw new AppError('task_not_found', `task '${address}' does not exist`, 'task_address');
    }
    return {
      ...withUsageSource(taskView(task, 'operator'), task.usageSource),
      org: task.org_name,
      api_key_id: task.apiKeyId,
      segments: Array.isArray(task.segments) ? task.segments : null,
    };
  }
}
