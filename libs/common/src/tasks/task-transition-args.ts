import { ENDED_VERSION } from './task-transitions.lua';
import type { EndGuard, Ending, NewTask } from './task-state';

/**
 * How the repository's calls become the arguments of TASK_TRANSITIONS_LUA and of the Postgres
 * fallback: pure functions, so that the encoding is tested without Redis (see task-transition-args.spec.ts).
 * Field names are the short ones the script and parseSnapshot use.
 */

/** The field/value pairs of a new task, preceded by their count. */
export function creationArgs(task: NewTask): [number, ...(string | number)[]] {
  const pairs = [
    'id',
    task.id,
    'addr',
    task.address,
    'org',
    task.orgId,
    'key',
    task.apiKeyId ?? '',
    'model',
    task.modelId,
    'mode',
    task.mode,
    'api',
    task.api,
    'stream',
    task.stream ? '1' : '0',
    'line',
    task.line,
    'apiid',
    task.apiInstance,
    'dl',
    task.deadline,
  ];
  return [pairs.length / 2, ...pairs];
}

/** The fields an ending sets: its status, then only the values it has. */
export function endingPairs(ending: Ending): (string | number)[] {
  const pairs: (string | number)[] = ['st', ending.status];
  const optional: [string, string | number | null | undefined][] = [
    ['err', ending.errorCode],
    ['fr', ending.finishReason],
    ['pt', ending.promptTokens],
    ['ct', ending.completionTokens],
    ['sha', ending.outputSha256],
    ['ob', ending.outputBytes],
    ['us', ending.usageSource],
    ['ft', ending.firstTokenAt],
  ];
  for (const [field, value] of optional) {
    if (value !== null && value !== undefined) {
      pairs.push(field, value);
    }
  }
  return pairs;
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
  const from = guard === 'queued' ? ['queued'] : ['queued', 'assigned', 'streaming'];
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
