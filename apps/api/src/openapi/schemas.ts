import { z } from 'zod';

/**
 * Response schemas of the HTTP API, for the OpenAPI document (requests are described by the schemas
 * that validate them, imported where they live). Each is registered under the component name it
 * gets in the document; the e2e suite checks real responses against them.
 */
export const components = z.registry<{ id: string; description?: string }>();
function named<T extends z.ZodType>(id: string, description: string, schema: T): T {
  components.add(schema, { id, description });
  return schema;
}

/** Path parameter descriptions shared by routes.ts and admin-routes.ts. */
export const ADDRESS = 'A task address, `direct:<uuid>` or `network:<uuid>`';
export const MODEL = 'A model id; a `/` in it is sent as %2F';

const iso = z.iso.datetime({ offset: true });
const nullableIso = iso.nullable();
const uuid = z.uuid();
const list = <T extends z.ZodType>(item: T) => z.strictObject({ object: z.literal('list'), data: z.array(item) });

export const errorBody = named(
  'Error',
  'Every error under /v1, /admin and the operations routes: OpenAI’s shape. Match on `code`.',
  z.strictObject({
    error: z.strictObject({
      message: z.string(),
      type: z.string(),
      param: z.string().nullable(),
      code: z.string(),
    }),
  }),
);
export const ollamaError = named(
  'OllamaError',
  'Errors of the Ollama-compatible /api routes.',
  z.strictObject({ error: z.string() }),
);

export const health = named('Health', 'The process is up.', z.strictObject({ status: z.literal('ok') }));
const check = z.enum(['ok', 'unreachable']);
const checks = z.strictObject({ postgres: check, redis: check });
export const ready = named('Ready', 'Postgres and Redis answer.', z.strictObject({ status: z.literal('ok'), checks }));
export const notReady = named(
  'NotReady',
  'A dependency does not answer: the error names it (and nothing else about it); `checks` says `ok` or `unreachable` for each.',
  z.strictObject({ error: errorBody.shape.error, checks }),
);

export const model = named(
  'Model',
  'A model enabled for the caller’s organization.',
  z.strictObject({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() }),
);
export const modelList = named('ModelList', 'The models enabled for the caller’s organization.', list(model));

const taskFields = {
  object: z.literal('task'),
  task_address: z.string(),
  status: z.enum(['queued', 'assigned', 'streaming', 'completed', 'failed', 'cancelled', 'timed_out']),
  model: z.string(),
  mode: z.enum(['direct', 'network']),
  api: z.enum(['openai', 'ollama']),
  stream: z.boolean(),
  device_id: uuid.nullable(),
  attempts: z.number().int(),
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
  queued_at: iso,
  assigned_at: nullableIso,
  first_token_at: nullableIso,
  finished_at: nullableIso,
};
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
export const adminTask = named(
  'AdminTask',
  'A task record of any organization.',
  z.strictObject({ ...taskFields, org: z.string(), api_key_id: uuid.nullable() }),
);

const percentiles = z.strictObject({ p50: z.number().nullable(), p95: z.number().nullable() });
export const usageRow = named(
  'UsageRow',
  'One group: its fields (those named in group_by) and its counts.',
  z.strictObject({
    model: z.string().optional(),
    key: uuid.nullable().optional(),
    key_prefix: z.string().nullable().optional(),
    key_label: z.string().nullable().optional(),
    day: z.iso.date().optional(),
    hour: iso.optional(),
    mode: z.enum(['direct', 'network']).optional(),
    status: taskFields.status.optional(),
    org: z.string().nullable().optional(),
    requests: z.number().int(),
    completed: z.number().int(),
    failed: z.number().int(),
    cancelled: z.number().int(),
    timed_out: z.number().int(),
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    output_bytes: z.number().int(),
    ttft_ms: percentiles,
    duration_ms: percentiles,
  }),
);
export const usageReport = named(
  'UsageReport',
  'A usage report over [from, to).',
  z.strictObject({
    object: z.literal('list'),
    from: iso,
    to: iso,
    group_by: z.array(z.enum(['model', 'key', 'day', 'hour', 'mode', 'status', 'org'])),
    data: z.array(usageRow),
  }),
);

const toolCall = z.strictObject({
  id: z.string(),
  type: z.literal('function'),
  function: z.strictObject({ name: z.string(), arguments: z.string() }),
});
const tokenUsage = z.strictObject({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
});
const logprobs = z.looseObject({ content: z.array(z.looseObject({})).nullable(), refusal: z.null() }).nullable();
const finishReason = z.enum(['stop', 'length', 'tool_calls', 'function_call', 'content_filter']);
export const chatCompletion = named(
  'ChatCompletion',
  'A chat completion (stream: false): OpenAI’s object plus `mode` and `task_address`.',
  z.strictObject({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.strictObject({
        index: z.number().int(),
        message: z.strictObject({
          role: z.literal('assistant'),
          content: z.string().nullable(),
          refusal: z.null(),
          reasoning_content: z.string().optional(),
          tool_calls: z.array(toolCall).optional(),
        }),
        logprobs,
        finish_reason: finishReason,
      }),
    ),
    usage: tokenUsage.optional(),
    system_fingerprint: z.string(),
    mode: z.enum(['direct', 'network']),
    task_address: z.string(),
  }),
);
export const chatCompletionChunk = named(
  'ChatCompletionChunk',
  'One `data:` event of a streamed chat completion (the stream ends with `data: [DONE]`).',
  z.looseObject({
    id: z.string(),
    object: z.literal('chat.completion.chunk'),
    created: z.number().int(),
    model: z.string(),
    system_fingerprint: z.string(),
    choices: z.array(
      z.looseObject({ index: z.number().int(), delta: z.looseObject({}), finish_reason: finishReason.nullable() }),
    ),
    usage: tokenUsage.nullable().optional(),
    mode: z.enum(['direct', 'network']),
    task_address: z.string(),
  }),
);

const ollamaMessage = z.strictObject({
  role: z.literal('assistant'),
  content: z.string(),
  thinking: z.string().optional(),
  tool_calls: z
    .array(
      z.strictObject({ function: z.strictObject({ name: z.string(), arguments: z.record(z.string(), z.unknown()) }) }),
    )
    .optional(),
});
export const ollamaChat = named(
  'OllamaChatResponse',
  'Ollama’s answer (stream: false), plus `mode` and `task_address`; streamed, the lines are the same objects with done: false, then one with done: true.',
  z.strictObject({
    model: z.string(),
    created_at: iso,
    message: ollamaMessage,
    done: z.literal(true),
    done_reason: z.enum(['stop', 'length']),
    mode: z.enum(['direct', 'network']),
    task_address: z.string(),
    total_duration: z.number().int(),
    load_duration: z.number().int(),
    prompt_eval_count: z.number().int(),
    prompt_eval_duration: z.number().int(),
    eval_count: z.number().int(),
    eval_duration: z.number().int(),
  }),
);
const ollamaDetails = z.strictObject({
  parent_model: z.string(),
  format: z.string(),
  family: z.string(),
  families: z.array(z.string()).nullable(),
  parameter_size: z.string(),
  quantization_level: z.string(),
});
export const ollamaTags = named(
  'OllamaTags',
  'The models enabled for the caller’s organization, as Ollama lists them (size and digest are placeholders).',
  z.strictObject({
    models: z.array(
      z.strictObject({
        name: z.string(),
        model: z.string(),
        modified_at: iso,
        size: z.number().int(),
        digest: z.string(),
        details: ollamaDetails,
      }),
    ),
  }),
);
export const ollamaShow = named(
  'OllamaShow',
  'One enabled model as Ollama describes it: details from its id, capabilities from the devices online for it.',
  z.strictObject({
    license: z.string(),
    modelfile: z.string(),
    parameters: z.string(),
    template: z.string(),
    details: ollamaDetails,
    model_info: z.record(z.string(), z.union([z.string(), z.number()])),
    capabilities: z.array(z.enum(['completion', 'tools', 'thinking'])),
    modified_at: iso,
  }),
);
export const ollamaPs = named(
  'OllamaPs',
  'The enabled models with a device online for the caller (Ollama’s running models); sizes are placeholders.',
  z.strictObject({
    models: z.array(
      z.strictObject({
        name: z.string(),
        model: z.string(),
        size: z.number().int(),
        digest: z.string(),
        details: ollamaDetails,
        expires_at: iso,
        size_vram: z.number().int(),
      }),
    ),
  }),
);
export const ollamaVersion = named(
  'OllamaVersion',
  'The Ollama API version the /api routes follow.',
  z.strictObject({ version: z.string() }),
);
