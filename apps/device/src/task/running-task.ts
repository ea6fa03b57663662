import { performance } from 'node:perf_hooks';
import type { ChatMessage, ChoiceDelta, FinishReason, ToolCall, Usage } from '@app/common/protocol/chat';
import type { AssignPayload, DeviceErrorCode } from '@app/common/protocol/device-protocol';
import { DEVICE_ERROR_CODES } from '@app/common/protocol/device-protocol';
import type { DispatcherLink } from '../link/dispatcher-link';

/** The protocol bounds an error message to 2000 characters. */
const MAX_ERROR_MESSAGE = 2_000;

export type Outcome = 'completed' | 'failed' | 'cancelled' | 'disconnected' | 'shutdown';

export interface TaskEnding {
  finish_reasons?: FinishReason[];
  usage?: Usage | null;
  error_code?: string;
}

/** The one task a device runs: what it was given, how far it got, and what its log line says. */
export interface RunningTask {
  address: string;
  /** The connection the task came on: its events go out on that one only. */
  connection: DispatcherLink['connection'];
  model: string;
  attempt: number;
  /** The api's request id, so that one id follows the request through every log. */
  requestId: string | null;
  controller: AbortController;
  /** The backend's run returned or threw: it is done with the controller's signal. */
  settled: boolean;
  /** Next sequence number: 0 for the first event of the task, one more per event. */
  seq: number;
  startedAt: number;
  firstDeltaAt: number | null;
  deltas: number;
  /** Kept only with --log-content. */
  prompt?: ChatMessage[];
  output?: { content: string; reasoning: string; tool_calls: ToolCall[] }[];
}

/**
 * Stops the task's backend if it still runs. One that returned or threw is not aborted: an abort with
 * no reason builds an AbortError (a DOMException, with its stack) for no listener, 6 % of an agent's
 * busy time at 1,200 tasks/s.
 */
export function stopBackend(task: RunningTask): void {
  if (!task.settled) {
    task.controller.abort();
  }
}

export function runningTask(
  payload: AssignPayload,
  connection: DispatcherLink['connection'],
  logContent: boolean,
): RunningTask {
  const task: RunningTask = {
    address: payload.task_address,
    connection,
    model: payload.model,
    attempt: payload.attempt,
    requestId: payload.request_id ?? null,
    controller: new AbortController(),
    settled: false,
    seq: 0,
    startedAt: performance.now(),
    firstDeltaAt: null,
    deltas: 0,
  };
  if (logContent) {
    task.prompt = payload.params.messages;
    task.output = [];
  }
  return task;
}

/** Counts a delta (and keeps its content with --log-content). */
export function recordDelta(task: RunningTask, choices: ChoiceDelta[]): void {
  task.firstDeltaAt ??= performance.now();
  task.deltas++;
  if (task.output) {
    for (const choice of choices) {
      const out = (task.output[choice.index] ??= { content: '', reasoning: '', tool_calls: [] });
      out.content += choice.content ?? '';
      out.reasoning += choice.reasoning ?? '';
      out.tool_calls.push(...(choice.tool_calls ?? []));
    }
  }
}

/** The fields of a task's one log line. */
export function taskLogLine(task: RunningTask, outcome: Outcome, extra: TaskEnding): Record<string, unknown> {
  const ms = (x: number) => Math.round(x * 10) / 10;
  return {
    task_address: task.address,
    request_id: task.requestId,
    model: task.model,
    attempt: task.attempt,
    outcome,
    finish_reasons: extra.finish_reasons,
    error_code: extra.error_code,
    prompt_tokens: extra.usage?.prompt_tokens,
    completion_tokens: extra.usage?.completion_tokens ?? null,
    deltas: task.deltas,
    ttft_ms: task.firstDeltaAt === null ? null : ms(task.firstDeltaAt - task.startedAt),
    total_ms: ms(performance.now() - task.startedAt),
    ...(task.output ? { prompt: task.prompt, completion: task.output } : {}),
  };
}

/** The protocol's error code for whatever a backend threw (`backend_error` when it has none of them). */
export function errorCode(error: unknown): DeviceErrorCode {
  const code = (error as { code?: unknown } | null)?.code;
  return (DEVICE_ERROR_CODES as readonly unknown[]).includes(code) ? (code as DeviceErrorCode) : 'backend_error';
}

export function errorMessage(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return (message || 'the backend failed').slice(0, MAX_ERROR_MESSAGE);
}
