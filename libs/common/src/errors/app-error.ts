/**
 * Every error code Switchyard answers with, and its HTTP status. Codes are part of the public API:
 * clients match on them, so they are never renamed.
 */
export const ERROR_STATUS = {
  invalid_request: 400,
  invalid_json: 400,
  model_required: 400,
  unsupported_parameter: 400,
  unsupported_content_part: 400,
  unsupported_by_node: 400,
  context_length_exceeded: 400,
  unsupported_by_model: 400,
  upstream_bad_request: 400,
  /** A chat request naming an embedding model. */
  not_a_chat_model: 400,
  /** An embeddings request naming a chat model. */
  not_an_embedding_model: 400,
  invalid_api_key: 401,
  invalid_admin_token: 401,
  network_not_allowed: 403,
  not_found: 404,
  unknown_url: 404,
  model_not_found: 404,
  task_not_found: 404,
  org_not_found: 404,
  key_not_found: 404,
  device_not_found: 404,
  canary_not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  request_too_large: 413,
  unsupported_media_type: 415,
  rate_limit_exceeded: 429,
  /** A monthly token budget (the org's or the key's) is used up: OpenAI's code for a quota run out. */
  insufficient_quota: 429,
  internal_error: 500,
  device_error: 502,
  device_disconnected: 502,
  device_protocol_error: 502,
  device_output_exceeded: 502,
  dispatcher_lost: 502,
  relay_interrupted: 502,
  model_unavailable: 502,
  upstream_unauthorized: 502,
  upstream_error: 502,
  upstream_bad_response: 502,
  upstream_unreachable: 502,
  device_shutdown: 502,
  backend_error: 502,
  upstream_busy: 503,
  device_timeout: 504,
  no_device_available: 503,
  queue_timeout: 503,
  service_unavailable: 503,
  server_shutdown: 503,
  stream_timeout: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** OpenAI's error `type` for a status. */
export function errorType(status: number): string {
  if (status === 401) {
    return 'authentication_error';
  }
  if (status === 429) {
    return 'rate_limit_error';
  }
  if (status >= 500) {
    return status === 503 ? 'service_unavailable_error' : 'server_error';
  }
  return 'invalid_request_error';
}

/** The one error type of Switchyard: a code from {@link ERROR_STATUS}, a message for people, the param at fault. */
export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly param: string | null = null,
    /** Extra response headers, e.g. Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'AppError';
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }

  /** The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`. */
  toOpenAI(): OpenAIErrorBody {
    return openAIError(this.status, this.message, this.code, this.param);
  }
}

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

export function openAIError(
  status: number,
  message: string,
  code: string,
  param: string | null = null,
): OpenAIErrorBody {
  // OpenAI sends invalid_request_error for 401 bodies with code invalid_api_key, and names the type of a
  // quota run out after its code.
  const type =
    code === 'invalid_api_key'
      ? 'invalid_request_error'
      : code === 'insufficient_quota'
        ? 'insufficient_quota'
        : errorType(status);
  return { error: { message, type, param, code } };
}
