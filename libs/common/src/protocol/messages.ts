import { z } from 'zod';
import { FEATURES, choiceDeltaSchema, chatParamsSchema, finishReasonSchema, usageSchema } from './chat';
import { EMBED_MAX_INPUTS, embedParamsSchema, embeddingVectorSchema } from './embeddings';

/**
 * The messages of the device protocol, current version (PROTOCOL_VERSION in catalog.ts): every
 * event's payload and every acknowledgement as a zod schema, with its TypeScript type inferred from it,
 * so that the two cannot drift. catalog.ts says which event carries which; docs/protocol.md describes them.
 */

const address = z.string().regex(/^(direct|network):[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
const seq = z.number().int().min(0).max(10_000_000);

/** A model digest as Switchyard writes it: `sha256:` and 64 lowercase hex digits (Ollama's digest, prefixed). */
export const MODEL_DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * What the device's runtime says a model it serves is. Every field is the runtime's word, not a proof:
 * null where the runtime does not say. Ollama gives a digest of the weights and their details (from
 * /api/tags); vLLM the weights' name (`root`) and context length (`max_model_len`, from /v1/models);
 * llama.cpp's server the model file (`model_path`) and context (`n_ctx`, from /props).
 */
export const modelIdentitySchema = z.object({
  /** A public model id of the announce's `models`. */
  model: z.string().min(1).max(200),
  digest: z.string().regex(MODEL_DIGEST).nullable(),
  family: z.string().max(100).nullable(),
  parameter_size: z.string().max(32).nullable(),
  quantization: z.string().max(32).nullable(),
  /** The weights' name or path as the runtime gives it (vLLM's `root`, llama.cpp's `model_path`). */
  root: z.string().max(500).nullable(),
  context_length: z.number().int().min(1).max(100_000_000).nullable(),
});
export type ModelIdentity = z.infer<typeof modelIdentitySchema>;

/** Announced after connecting and whenever the served models, features or availability change. */
export const announceSchema = z.object({
  agent_version: z.string().max(64),
  backend: z.string().max(64),
  /** Public model ids. The dispatcher accepts at most DEVICE_MAX_MODELS (a bound of its configuration). */
  models: z.array(z.string().min(1).max(200)).max(1000),
  features: z.array(z.enum(FEATURES)).max(FEATURES.length),
  /** False while the device's runtime is unreachable: it takes no tasks. */
  available: z.boolean(),
  /** The task the agent is still running after a reconnect, if any. */
  running_task: address.nullable(),
  /** What the runtime says each model is, for the models it says anything of (at most one entry per model). */
  identities: z.array(modelIdentitySchema).max(1000),
  /**
   * Asks what this announce would get without serving anything (`switchyard-device doctor`): the ack
   * is the same, and the device's models, features and presence stay as they were.
   */
  dry_run: z.boolean().optional(),
});
export type AnnouncePayload = z.infer<typeof announceSchema>;

/**
 * How many announces a device may send: ANNOUNCE_LIMITS.burst at once, then ANNOUNCE_LIMITS.perSecond
 * (a token bucket per connection). Each costs the dispatcher a Postgres check of the models and a
 * rewrite of the device's presence (unbounded, one device made about 6,300 Redis commands a second
 * with them); the agent announces on connect, on a change of its runtime and twice on shutdown, and
 * paces itself to half of this. An announce over it is refused in its ack and counts as a strike.
 */
export const ANNOUNCE_LIMITS = { burst: 10, perSecond: 2 } as const;

/**
 * Why the dispatcher refuses to let a device serve a model. `digest_mismatch`: an admin pinned the
 * digests the model may be served with, and the device's runtime announced another; `digest_unknown`:
 * the model is pinned and the device announced no digest for it; `quarantined`: the device is a
 * network device an operator quarantined (it serves nothing).
 */
export const REFUSAL_REASONS = [
  'unknown_model',
  'not_enabled',
  'not_allowed',
  'not_network',
  'digest_mismatch',
  'digest_unknown',
  'quarantined',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** The dispatcher's answer to an announce: the models it accepted and refused, or why it refused the announce whole. */
export const announceAckSchema = z.union([
  z.object({
    ok: z.literal(true),
    device_id: z.string(),
    pool: z.enum(['direct', 'network']),
    /** The models the device will be given tasks for. */
    models: z.array(z.string()),
    refused: z.array(z.object({ model: z.string(), reason: z.enum(REFUSAL_REASONS) })),
  }),
  z.object({ ok: z.literal(false), error: z.string() }),
]);
export type AnnounceAck = z.infer<typeof announceAckSchema>;

const assignedTask = z.object({
  task_address: address,
  model: z.string().min(1),
  attempt: z.number().int().min(1),
  /** The api's request id, so that one id follows a request through every log. */
  request_id: z.string().max(128).optional(),
  /**
   * W3C trace context of the dispatcher's span of this assignment, when traces are exported: the
   * agent's runtime call is its child, and the runtime request carries it on.
   */
  traceparent: z
    .string()
    .regex(/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/)
    .optional(),
});

/** A chat task handed to a device (`kind` is absent: the only kind before embeddings). */
export const chatAssignSchema = assignedTask.extend({
  kind: z.literal('chat').optional(),
  params: chatParamsSchema,
});
export type ChatAssignPayload = z.infer<typeof chatAssignSchema>;

/**
 * An embedding task handed to a device: one batch of a request's inputs. Sent only to a device that
 * declares the `embeddings` feature; it answers with `task:embedding` events, then `task:done`.
 */
export const embedAssignSchema = assignedTask.extend({
  kind: z.literal('embed'),
  embed: embedParamsSchema,
});
export type EmbedAssignPayload = z.infer<typeof embedAssignSchema>;

/** A task handed to a device. */
export const assignSchema = z.union([chatAssignSchema, embedAssignSchema]);
export type AssignPayload = z.infer<typeof assignSchema>;

/** The device's answer to an assignment: it takes the task, or refuses it with a reason of its own. */
export const assignAckSchema = z.union([
  z.object({ accepted: z.literal(true) }),
  z.object({ accepted: z.literal(false), reason: z.string().max(200) }),
]);
export type AssignAck = z.infer<typeof assignAckSchema>;

/** The dispatcher stops a task the device holds: it sends nothing more for it. */
export const cancelSchema = z.object({ task_address: address });
export type CancelPayload = z.infer<typeof cancelSchema>;

/** Output for one or more choices. `seq` starts at 0 for each task and grows by one per event. */
export const deltaSchema = z.object({
  task_address: address,
  seq,
  choices: z.array(choiceDeltaSchema).min(1).max(8),
});
export type DeltaPayload = z.infer<typeof deltaSchema>;

/**
 * Vectors of an embedding task, each for one input (by its index in the task's `embed.input`), in any
 * number of events (each under the dispatcher's DEVICE_MAX_EVENT_BYTES); every input gets exactly one.
 */
export const embeddingSchema = z.object({
  task_address: address,
  seq,
  data: z.array(embeddingVectorSchema).min(1).max(EMBED_MAX_INPUTS),
});
export type EmbeddingPayload = z.infer<typeof embeddingSchema>;

/**
 * A task ended with output: the finish reason of each choice and the runtime's usage. An embedding
 * task ends with no finish reasons, and usage whose completion is 0.
 */
export const doneSchema = z.object({
  task_address: address,
  seq,
  /** finish_reason per choice index; empty for an embedding task. */
  finish_reasons: z.array(finishReasonSchema).max(8),
  usage: usageSchema.nullable(),
});
export type DonePayload = z.infer<typeof doneSchema>;

/**
 * The codes a device may end a task with (docs/device.md says when the agent uses each). Anything else
 * is an invalid event. What the client sees for each is in errors/device-errors.ts.
 */
export const DEVICE_ERROR_CODES = [
  'model_not_found',
  'context_length_exceeded',
  'unsupported_by_model',
  'upstream_unauthorized',
  'upstream_busy',
  'upstream_bad_request',
  'upstream_error',
  'upstream_bad_response',
  'upstream_unreachable',
  'invalid_request',
  'device_shutdown',
  'backend_error',
  'cancelled',
] as const;
export type DeviceErrorCode = (typeof DEVICE_ERROR_CODES)[number];

/** A task ended without a complete answer, with a code from DEVICE_ERROR_CODES. */
export const taskErrorSchema = z.object({
  task_address: address,
  seq,
  code: z.enum(DEVICE_ERROR_CODES),
  message: z.string().max(2000),
});
export type TaskErrorPayload = z.infer<typeof taskErrorSchema>;
