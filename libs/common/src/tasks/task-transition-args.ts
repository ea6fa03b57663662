import { ENDED_VERSION } from './task-transitions.lua';
import type { EndGuard, Ending, NewTask } from './task-state';
import { taskStateCodec } from './task-state-codec';
import { LIVE_STATUSES } from './task-statuses';

/**
 * How the repository's calls become the arguments of TASK_TRANSITIONS_LUA and of the Postgres
 * fallback: pure functions, so that the encoding is tested without Redis (see task-transition-args.spec.ts).
 * Field names and values are taskStateCodec's.
 */

/** The field/value pairs of a new task, preceded by their count. */
export function creationArgs(task: NewTask): [number, ...string[]] {
  const pairs = taskStateCodec.pairs({
    id: task.id,
    address: task.address,
    orgId: task.orgId,
    apiKeyId: task.apiKeyId,
    modelId: task.modelId,
    mode: task.mode,
    api: task.api,
    kind: task.kind,
    stream: task.stream,
    line: task.line,
    apiInstance: task.apiInstance,
    deadline: task.deadline,
    budgets: task.budgets ?? undefined,
    traceId: task.traceId ?? undefined,
  });
  return [pairs.length / 2, ...pairs];
}

/** The fields an ending sets: its status, then only the values it has (a missing value never erases one). */
export function endingPairs(ending: Ending): string[] {
  return taskStateCodec.pairs({
    status: ending.status,
    errorCode: ending.errorCode ?? undefined,
    finishReason: ending.finishReason ?? undefined,
    promptTokens: ending.promptTokens ?? undefined,
    completionTokens: ending.completionTokens ?? undefined,
    outputSha256: ending.outputSha256 ?? undefined,
    outputBytes: ending.outputBytes ?? undefined,
    usageSource: ending.usageSource ?? undefined,
    segments: ending.segments ?? undefined,
    firstTokenAt:
      ending.firstTokenAt === null || ending.firstTokenAt === undefined ? undefined : new Date(ending.firstTokenAt),
  });
}

/** The fields a first output sets beside its status: when it came, if that was before now (held). */
export function firstOutputPairs(at: number | undefined): string[] {
  return at === undefined ? [] : taskStateCodec.pairs({ firstTokenAt: new Date(at) });
}

/** Who claims a task: the device, the model digest it announced (null: none), its dispatcher, the lock token. */
export interface Claimant {
  deviceId: string;
  modelDigest: string | null;
  dispatcherId: string;
  token: string;
}

/**
 * The fields a claim sets: the assignment's device, digest, dispatcher and lock token. The digest is
 * always written (empty for none), so that an earlier attempt's never stays beside another device.
 */
export function claimPairs(by: Claimant): string[] {
  return taskStateCodec.pairs({
    deviceId: by.deviceId,
    modelDigest: by.modelDigest,
    dispatcherId: by.dispatcherId,
    token: by.token,
  });
}

/** An ending's guard as the script reads it: '' (any), 'queued', or 'attempt:<n>'. */
export function guardArg(guard: EndGuard): string {
  return guard === 'any' ? '' : guard === 'queued' ? 'queued' : `attempt:${guard.attempt}`;
}

/**
 * The ending of a task whose state Redis lost (or cannot reach), written to its record directly:
 * only from a state the guard allows, with the final version, so that nothing written behind can
 * replace it. The attempt guard cannot be checked there (Redis held the attempt): any live state.
 */
export function endRecordStatement(
  taskId: string,
  ending: Ending,
  guard: EndGuard,
): { text: string; values: unknown[] } {
  const from = guard === 'queued' ? ['queued'] : [...LIVE_STATUSES];
  return {
    text: `UPDATE tasks SET status = $2, error_code = COALESCE($3, error_code), finish_reason = COALESCE($4, finish_reason),
         prompt_tokens = COALESCE($5, prompt_tokens), completion_tokens = COALESCE($6, completion_tokens),
         output_sha256 = COALESCE($7, output_sha256), finished_at = now(), record_version = $8,
         output_bytes = COALESCE($10, output_bytes), usage_source = COALESCE($11, usage_source)
       WHERE id = $1 AND status = ANY($9::task_status[])`,
    values: [
      taskId,
      ending.status,
      ending.errorCode ?? null,
      ending.finishReason ?? null,
      ending.promptTokens ?? null,
      ending.completionTokens ?? null,
      ending.outputSha256 ?? null,
      ENDED_VERSION,
      from,
      ending.outputBytes ?? null,
      ending.usageSource ?? null,
    ],
  };
}
