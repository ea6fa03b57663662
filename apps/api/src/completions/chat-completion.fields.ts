/**
 * How the OpenAI route treats each top-level field beyond the schema: which are ignored (and
 * reported), which are refused outright, and the `null`-means-not-sent rule. Kept apart from the
 * schema so that the ignored list can be worked out before validation: the
 * x-switchyard-ignored-params header is set on every answer to a parsed body, errors included.
 */

/** Accepted and without effect; listed in the x-switchyard-ignored-params response header. */
export const IGNORED = new Set([
  'seed',
  'user',
  'safety_identifier',
  'store',
  'metadata',
  'service_tier',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
]);

/** Refused with 400 unsupported_parameter: honouring them is impossible on a device, ignoring them would mislead. */
export const REJECTED = ['prediction', 'verbosity', 'moderation', 'modalities', 'audio'];

/** Fields Switchyard acts on (or refuses); any other field is ignored and reported. */
export const KNOWN = new Set([
  'model',
  'messages',
  'stream',
  'temperature',
  'top_p',
  'max_completion_tokens',
  'max_tokens',
  'stop',
  'include_stop_str_in_output',
  'frequency_penalty',
  'presence_penalty',
  'mode',
  'stream_options',
  'response_format',
  'tools',
  'tool_choice',
  'functions',
  'function_call',
  'logprobs',
  'top_logprobs',
  'n',
  'logit_bias',
  'reasoning_effort',
  'web_search_options',
  'parallel_tool_calls',
  ...REJECTED,
]);

export const isRecord = (v: unknown): v is Record<string, unknown> =>
  Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/** Drops the null fields of an object (one level), keeping those named in `keep`. */
function withoutNulls(value: unknown, keep: string[] = []): unknown {
  return isRecord(value)
    ? Object.fromEntries(Object.entries(value).filter(([k, v]) => v !== null || keep.includes(k)))
    : value;
}

/**
 * `null` counts as not sent: at the top level, in messages (except a message's content, where null
 * is meaningful), in stream_options, response_format.json_schema, and tool and function definitions.
 * JSON schemas themselves are left as they are (null is a valid value there).
 */
export function dropNulls(body: Record<string, unknown>): Record<string, unknown> {
  const out = withoutNulls(body) as Record<string, unknown>;
  if (Array.isArray(out.messages)) {
    out.messages = out.messages.map((m) => withoutNulls(m, ['content']));
  }
  out.stream_options = withoutNulls(out.stream_options);
  out.web_search_options = withoutNulls(out.web_search_options);
  if (isRecord(out.response_format)) {
    out.response_format = { ...out.response_format, json_schema: withoutNulls(out.response_format.json_schema) };
    if ((out.response_format as Record<string, unknown>).json_schema === undefined) {
      delete (out.response_format as Record<string, unknown>).json_schema;
    }
  }
  if (Array.isArray(out.tools)) {
    out.tools = out.tools.map((t) => (isRecord(t) ? { ...t, function: withoutNulls(t.function) } : t));
  }
  if (Array.isArray(out.functions)) {
    out.functions = out.functions.map((f) => withoutNulls(f));
  }
  for (const key of Object.keys(out)) {
    if (out[key] === undefined) {
      delete out[key];
    }
  }
  return out;
}

/** The sent (non-null) top-level fields that have no effect: the listed ones and the unknown ones. */
export function ignoredParams(raw: unknown): string[] {
  if (!isRecord(raw)) {
    return [];
  }
  return Object.keys(raw).filter((k) => raw[k] !== null && (IGNORED.has(k) || !KNOWN.has(k)));
}
