import { z } from 'zod';
import type { ChatParams, ChoiceDelta, Feature, FinishReason, Usage } from './chat';
import { FEATURES } from './chat';

/**
 * The device protocol: socket.io namespace `/devices`. Event names and payloads are defined here
 * once, for the dispatcher and the agent alike, and documented in docs/protocol.md. Bump
 * PROTOCOL_VERSION on any incompatible change.
 */
export const PROTOCOL_VERSION = 1;
export const DEVICE_NAMESPACE = '/devices';

/** What a device sends in the socket.io handshake's `auth`. */
export interface DeviceHandshakeAuth {
  token: string;
  protocol: number;
}

/** Announced after connecting and whenever the served models or availability change. */
export interface AnnouncePayload {
  agent_version: string;
  backend: string;
  models: string[];
  features: Feature[];
  /** False while the device's runtime is unreachable: it takes no tasks. */
  available: boolean;
  /** The task the agent is still running after a reconnect, if any. */
  running_task: string | null;
}

export interface AnnounceAck {
  ok: true;
  device_id: string;
  pool: 'direct' | 'network';
}

/** A task handed to a device. */
export interface AssignPayload {
  task_address: string;
  model: string;
  attempt: number;
  params: ChatParams;
  /** The api's request id, so that one id follows a request through every log. */
  request_id?: string;
}

export type AssignAck = { accepted: true } | { accepted: false; reason: string };

export interface CancelPayload {
  task_address: string;
}

/** Output for one or more choices. `seq` starts at 0 for each task and grows by one per event. */
export interface DeltaPayload {
  task_address: string;
  seq: number;
  choices: ChoiceDelta[];
}

export interface DonePayload {
  task_address: string;
  seq: number;
  /** finish_reason per choice index. */
  finish_reasons: FinishReason[];
  usage: Usage | null;
}

export interface TaskErrorPayload {
  task_address: string;
  seq: number;
  code: string;
  message: string;
}

export interface ServerToDeviceEvents {
  'task:assign': (payload: AssignPayload, ack: (answer: AssignAck) => void) => void;
  'task:cancel': (payload: CancelPayload) => void;
}

export interface DeviceToServerEvents {
  announce: (payload: AnnouncePayload, ack: (answer: AnnounceAck | { ok: false; error: string }) => void) => void;
  'task:delta': (payload: DeltaPayload) => void;
  'task:done': (payload: DonePayload) => void;
  'task:error': (payload: TaskErrorPayload) => void;
}

/** What the dispatcher knows of an authenticated socket. */
export interface DeviceSocketData {
  deviceId: string;
  orgId: string | null;
  name: string;
}

/** The largest token count a task row can hold (a Postgres integer). */
const MAX_TOKENS_COUNT = 2_147_483_647;

// Inbound validation: a device is not trusted. Sizes bound what one event can carry.
const address = z.string().regex(/^(direct|network):[0-9a-f-]{36}$/);
const seq = z.number().int().min(0).max(10_000_000);
const toolCall = z.object({
  id: z.string().max(200),
  type: z.literal('function'),
  function: z.object({ name: z.string().max(200), arguments: z.string().max(1_000_000) }),
});
const topLogprob = z.object({
  token: z.string().max(1000),
  logprob: z.number(),
  bytes: z.array(z.number().int()).max(4000).nullable(),
});

export const announceSchema = z.object({
  agent_version: z.string().max(64),
  backend: z.string().max(64),
  models: z.array(z.string().min(1).max(200)).max(1000),
  features: z.array(z.enum(FEATURES)).max(FEATURES.length),
  available: z.boolean(),
  running_task: address.nullable(),
});

export const deltaSchema = z.object({
  task_address: address,
  seq,
  choices: z
    .array(
      z.object({
        index: z.number().int().min(0).max(7),
        content: z.string().max(1_000_000).optional(),
        reasoning: z.string().max(1_000_000).optional(),
        tool_calls: z.array(toolCall).max(64).optional(),
        logprobs: z
          .array(topLogprob.extend({ top_logprobs: z.array(topLogprob).max(20) }))
          .max(10_000)
          .optional(),
      }),
    )
    .min(1)
    .max(8),
});

export const doneSchema = z.object({
  task_address: address,
  seq,
  finish_reasons: z
    .array(z.enum(['stop', 'length', 'tool_calls']))
    .min(1)
    .max(8),
  usage: z
    .object({
      // Token counts are stored as Postgres integers.
      prompt_tokens: z.number().int().min(0).max(MAX_TOKENS_COUNT),
      completion_tokens: z.number().int().min(0).max(MAX_TOKENS_COUNT),
      total_tokens: z.number().int().min(0).max(MAX_TOKENS_COUNT),
    })
    .nullable(),
});

export const taskErrorSchema = z.object({
  task_address: address,
  seq,
  code: z.string().regex(/^[a-z_]{1,64}$/),
  message: z.string().max(2000),
});
