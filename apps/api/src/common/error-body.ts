import { AppError, ERROR_STATUS, openAIError } from '@app/common';
import type { ErrorCode } from '@app/common';
import { HttpException } from '@nestjs/common';
import type { RouteFamily } from './route-family';

export interface ErrorResponse {
  status: number;
  body: unknown;
  headers: Record<string, string>;
  /** Whether it is our fault (logged with the request id), not the client's. */
  unexpected: boolean;
}

/** Fastify's own errors a client can cause, and the code each one becomes. */
const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_BODY_TOO_LARGE: 'request_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_CTP_INVALID_TYPE: 'unsupported_media_type',
};

const CLIENT_ERRORS = {
  invalid_json: () =>
    new AppError('invalid_json', 'We could not parse the JSON body of your request. The body must be valid JSON.'),
  request_too_large: () => new AppError('request_too_large', 'The request body is too large.'),
  unsupported_media_type: () =>
    new AppError('unsupported_media_type', "Unsupported Content-Type: send the body as 'application/json'."),
};

/** Signs that Postgres or Redis is unreachable: the client gets 503 service_unavailable, not a 500. */
const UNREACHABLE =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|Connection is closed|Stream isn't writeable|MaxRetriesPerRequest|Can't reach database|Connection terminated|timeout exceeded when trying to connect|Server has closed the connection/i;
const UNREACHABLE_PRISMA_CODES = new Set(['P1001', 'P1002', 'P1008', 'P1017', 'P2024']);

/** Whether the error, or one of its causes, passes the test. */
function anyCause(
  error: unknown,
  test: (e: { name?: unknown; message?: unknown; code?: unknown }) => boolean,
): boolean {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth <= 4; depth++) {
    if (test(e)) {
      return true;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

const isDependencyDown = (error: unknown) =>
  anyCause(
    error,
    (e) =>
      e.name === 'MaxRetriesPerRequestError' ||
      (typeof e.code === 'string' && UNREACHABLE_PRISMA_CODES.has(e.code)) ||
      (typeof e.message === 'string' && UNREACHABLE.test(e.message)),
  );

/** Postgres refuses NUL in text (SQLSTATE 22021): a string the client sent, so a 400, not a 500. */
const hasNulByte = (error: unknown) =>
  anyCause(
    error,
    (e) =>
      e.code === '22021' ||
      (typeof e.message === 'string' && /invalid byte sequence for encoding "UTF8": 0x00/.test(e.message)),
  );

function toAppError(error: unknown): AppError | null {
  if (error instanceof AppError) {
    return error;
  }
  if (error instanceof HttpException) {
    // Nest turns Fastify's own errors (unparseable JSON, body too large) into HttpExceptions: map by status.
    const status = error.getStatus();
    const byStatus: Record<number, AppError> = {
      400: /json/i.test(error.message) ? CLIENT_ERRORS.invalid_json() : new AppError('invalid_request', error.message),
      404: new AppError('unknown_url', 'Unknown request URL. Please check the URL and method.'),
      413: CLIENT_ERRORS.request_too_large(),
      415: CLIENT_ERRORS.unsupported_media_type(),
    };
    if (byStatus[status]) {
      return byStatus[status];
    }
    const code = (Object.keys(ERROR_STATUS) as ErrorCode[]).find((c) => ERROR_STATUS[c] === status);
    return code && status < 500 ? new AppError(code, error.message) : null;
  }
  if (hasNulByte(error)) {
    return new AppError('invalid_request', 'The request contains a NUL character (\\u0000), which is not allowed.');
  }
  if (isDependencyDown(error)) {
    return new AppError(
      'service_unavailable',
      'Switchyard cannot reach its database or queue right now. Try again shortly.',
      null,
      { 'retry-after': '2' },
    );
  }
  const fastifyCode = (error as { code?: unknown } | null)?.code;
  if (typeof fastifyCode === 'string' && fastifyCode in FASTIFY_CODES) {
    const code = FASTIFY_CODES[fastifyCode];
    return code in CLIENT_ERRORS
      ? CLIENT_ERRORS[code as keyof typeof CLIENT_ERRORS]()
      : new AppError(code, (error as Error).message);
  }
  return null;
}

/** Turns any thrown value into the status, body and headers of the answer, in the route family's shape. */
export function errorResponse(error: unknown, family: RouteFamily, requestId: string): ErrorResponse {
  const known = toAppError(error);
  if (known) {
    const body = family === 'ollama' ? { error: known.message } : known.toOpenAI();
    return { status: known.status, body, headers: known.headers, unexpected: false };
  }
  const message = `The server had an error while processing your request (request id ${requestId}).`;
  const body = family === 'ollama' ? { error: message } : openAIError(500, message, 'internal_error');
  return { status: 500, body, headers: {}, unexpected: true };
}
