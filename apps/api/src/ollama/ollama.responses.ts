import { z } from 'zod';
import { named } from '../openapi/components';

const iso = z.iso.datetime({ offset: true });
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
const ollamaDetails = z.strictObject({
  parent_model: z.string(),
  format: z.string(),
  family: z.string(),
  families: z.array(z.string()).nullable(),
  parameter_size: z.string(),
  quantization_level: z.string(),
});

/** The answer of `/api/chat` with `stream: false`. */
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
    prompt_eval_count: z.number().int().optional().describe('The device’s prompt tokens; absent when it gave none'),
    prompt_eval_duration: z.number().int(),
    eval_count: z.number().int().optional().describe('The device’s completion tokens; absent when it gave none'),
    eval_duration: z.number().int(),
  }),
);

/** What the Ollama chat routes answer: JSON, or with `stream: true` NDJSON lines. */
export const OLLAMA_CHAT_MEDIA = { 'application/x-ndjson': 'One JSON object per line' };

/** `GET /api/tags`. */
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

/** `POST /api/show`. */
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
    capabilities: z.array(z.enum(['completion', 'tools', 'thinking', 'embedding'])),
    modified_at: iso,
  }),
);

/** `GET /api/ps`. */
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

/** `GET /api/version`. */
export const ollamaVersion = named(
  'OllamaVersion',
  'The Ollama API version the /api routes follow.',
  z.strictObject({ version: z.string() }),
);
